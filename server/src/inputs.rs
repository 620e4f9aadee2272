//! What a request hands in, read from its body: images as multipart files (`curl -F
//! file=@cat.jpg`), as base64 or data URIs in JSON, or as the raw body; the other fields
//! (`top_k`, `labels`, `template`) from the JSON document, the multipart text fields or the
//! query string. The server reads no local paths and fetches no URLs: an input that looks like
//! one is refused, saying so, unless `--allow-local-files DIR` allows `file:NAME` for files
//! under DIR ([`LocalFiles`]), or `--allow-url-fetch` allows `http://` and `https://` URLs
//! (fetched by `crate::fetch`).

use crate::error::ApiError;
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::header::CONTENT_TYPE;
use base64::Engine as _;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One image a request hands in: its file's bytes, a file under `--allow-local-files`, or a
/// URL under `--allow-url-fetch`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageInput {
    Bytes(Bytes),
    /// A file under the allowed folder (resolved, inside it).
    File(PathBuf),
    /// An `http://` or `https://` URL, fetched before decoding.
    Url(String),
}

/// What an image string may name besides the image itself: files in the allowed folder,
/// URLs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sources<'a> {
    pub local: Option<&'a LocalFiles>,
    pub urls: bool,
}

/// The folder `--allow-local-files` confines `file:NAME` images to.
#[derive(Clone, Debug)]
pub struct LocalFiles {
    /// Canonical: every file's canonical path must start with it.
    root: PathBuf,
}

impl LocalFiles {
    /// The folder `dir`, which must exist.
    pub fn new(dir: &Path) -> anyhow::Result<LocalFiles> {
        use anyhow::Context;
        let root = dir
            .canonicalize()
            .with_context(|| format!("--allow-local-files {}", dir.display()))?;
        anyhow::ensure!(
            root.is_dir(),
            "--allow-local-files {}: not a folder",
            dir.display()
        );
        Ok(LocalFiles { root })
    }

    /// The file `name` (relative to the folder) names, if it lies inside the folder once
    /// links and `..` are resolved.
    pub fn resolve(&self, name: &str) -> Result<PathBuf, String> {
        let name = name.trim_start_matches("//");
        let asked = Path::new(name);
        if asked.is_absolute() {
            return Err(format!(
                "file:{name}: name a file relative to the folder --allow-local-files allows"
            ));
        }
        let path = self
            .root
            .join(asked)
            .canonicalize()
            .map_err(|_| format!("file:{name}: no such file in the allowed folder"))?;
        if !path.starts_with(&self.root) {
            return Err(format!(
                "file:{name}: outside the folder --allow-local-files allows"
            ));
        }
        Ok(path)
    }
}

/// A request's images (encoded files, in order) and its text fields.
#[derive(Debug, Default)]
pub struct ImageRequest {
    pub images: Vec<ImageInput>,
    /// Fields by name, each possibly repeated (`template`), in order.
    pub fields: HashMap<String, Vec<String>>,
    /// The JSON document, when the body was one (lists and numbers kept as they are).
    pub json: Option<serde_json::Map<String, Value>>,
}

impl ImageRequest {
    /// Reads the body by its content type: multipart/form-data, application/json, or
    /// anything else as one raw image. `query` adds its fields (after the body's).
    pub async fn read(
        request: Request,
        query: HashMap<String, String>,
        sources: Sources<'_>,
    ) -> Result<Self, ApiError> {
        let content_type = request
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        let mut read = if content_type.starts_with("multipart/form-data") {
            let multipart = Multipart::from_request(request, &())
                .await
                .map_err(|e| ApiError::new(e.status(), e.body_text()))?;
            Self::multipart(multipart).await?
        } else if content_type.starts_with("application/json") {
            let body = body_bytes(request).await?;
            Self::json(&body, sources)?
        } else {
            let body = body_bytes(request).await?;
            if body.is_empty() {
                return Err(ApiError::bad_request(
                    "the body is empty: send an image as the body, as multipart files (-F \
                     file=@image.jpg) or as base64 in JSON ({\"images\": [...]})",
                ));
            }
            ImageRequest {
                images: vec![ImageInput::Bytes(body)],
                ..Default::default()
            }
        };
        for (name, value) in query {
            read.fields.entry(name).or_default().push(value);
        }
        Ok(read)
    }

    async fn multipart(mut multipart: Multipart) -> Result<Self, ApiError> {
        let mut read = ImageRequest::default();
        loop {
            let field = multipart
                .next_field()
                .await
                .map_err(|e| ApiError::new(e.status(), e.body_text()))?;
            let Some(field) = field else {
                break;
            };
            let name = field.name().unwrap_or("").to_string();
            let is_file = field.file_name().is_some();
            let bytes = field
                .bytes()
                .await
                .map_err(|e| ApiError::new(e.status(), e.body_text()))?;
            if is_file || name == "file" || name == "image" {
                read.images.push(ImageInput::Bytes(bytes));
            } else {
                let text = String::from_utf8(bytes.to_vec()).map_err(|_| {
                    ApiError::bad_request(format!("the form field {name:?} is not UTF-8 text"))
                })?;
                read.fields.entry(name).or_default().push(text);
            }
        }
        Ok(read)
    }

    fn json(body: &[u8], sources: Sources<'_>) -> Result<Self, ApiError> {
        let document: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))?;
        let Value::Object(map) = document else {
            return Err(ApiError::bad_request("the JSON body must be an object"));
        };
        let mut read = ImageRequest::default();
        let images = match map.get("images").or_else(|| map.get("image")) {
            Some(Value::String(one)) => vec![one.clone()],
            Some(Value::Array(many)) => many
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(ApiError::bad_request(format!(
                        "images[{i}] is not a string: give each image as base64 or a data URI"
                    ))),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(ApiError::bad_request(
                    "\"images\" must be a string or a list of strings (base64 or data URIs)",
                ))
            }
            None => Vec::new(),
        };
        for (i, image) in images.iter().enumerate() {
            read.images.push(
                image_string(image, sources)
                    .map_err(|why| ApiError::bad_request(format!("images[{i}]: {why}")))?,
            );
        }
        read.json = Some(map);
        Ok(read)
    }

    /// A field's values: the JSON document's (a string, a number, or a list of them), else
    /// the form's or the query's.
    pub fn values(&self, name: &str) -> Option<Vec<String>> {
        if let Some(value) = self.json.as_ref().and_then(|m| m.get(name)) {
            return Some(match value {
                Value::Array(items) => items.iter().map(json_text).collect(),
                other => vec![json_text(other)],
            });
        }
        self.fields.get(name).cloned()
    }

    /// Refuses a field the route does not take (a misspelt `top_k` would otherwise be
    /// ignored and its default answered).
    pub fn check_fields(&self, allowed: &[&str]) -> Result<(), ApiError> {
        let json_keys = self.json.iter().flat_map(|m| m.keys());
        let unknown = json_keys
            .chain(self.fields.keys())
            .filter(|k| !["images", "image"].contains(&k.as_str()))
            .find(|k| !allowed.contains(&k.as_str()));
        match unknown {
            Some(name) => Err(ApiError::bad_request(format!(
                "unknown field {name:?}: this route takes images and {}",
                allowed.join(", ")
            ))),
            None => Ok(()),
        }
    }

    /// `top_k`, 1 or more (default 5).
    pub fn top_k(&self) -> Result<usize, ApiError> {
        match self.values("top_k").as_deref() {
            None => Ok(5),
            Some([one]) => match one.trim().parse::<usize>() {
                Ok(k) if k >= 1 => Ok(k),
                _ => Err(ApiError::bad_request(format!(
                    "top_k is {one:?}: use a whole number, 1 or more"
                ))),
            },
            Some(_) => Err(ApiError::bad_request("top_k given more than once")),
        }
    }
}

fn json_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

async fn body_bytes(request: Request) -> Result<Bytes, ApiError> {
    Bytes::from_request(request, &())
        .await
        .map_err(|e| ApiError::new(e.status(), e.body_text()))
}

/// An image given as a string: a data URI (`data:image/jpeg;base64,...`), plain base64, or,
/// where `sources` allows them, `file:NAME` for a file in the allowed folder and `http(s)://`
/// URLs. Otherwise a URL or `file:` is refused: the server fetches and reads nothing it was
/// not sent unless told.
pub fn image_string(text: &str, sources: Sources<'_>) -> Result<ImageInput, String> {
    let text = text.trim();
    if let (Some(name), Some(local)) = (text.strip_prefix("file:"), sources.local) {
        return local.resolve(name).map(ImageInput::File);
    }
    if sources.urls && crate::fetch::is_url(text) {
        return Ok(ImageInput::Url(text.to_string()));
    }
    decode_image_string(text).map(ImageInput::Bytes)
}

/// An image given as a data URI or plain base64 (see [`image_string`]).
pub fn decode_image_string(text: &str) -> Result<Bytes, String> {
    let text = text.trim();
    let payload = if let Some(rest) = text.strip_prefix("data:") {
        let Some((meta, data)) = rest.split_once(',') else {
            return Err("a data URI without a comma before its data".to_string());
        };
        if !meta.ends_with(";base64") {
            return Err(format!(
                "a data URI of {meta:?}: only base64 data URIs (data:image/jpeg;base64,...) \
                 hold images"
            ));
        }
        data
    } else if text.contains("://") || text.starts_with("file:") {
        // (A path is not refused by its look: base64 may start with `/`, as a JPEG's does;
        // it is simply not base64, or not an image, and is never opened.)
        return Err(
            "URLs and paths are not read: this server takes the image itself, as base64 or a \
             data URI (vitrt serve --allow-local-files DIR reads file:NAME under DIR, \
             --allow-url-fetch fetches http(s) URLs)"
                .to_string(),
        );
    } else {
        text
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload.as_bytes())
        .map_err(|e| format!("not base64 ({e})"))?;
    if bytes.is_empty() {
        return Err("an empty image".to_string());
    }
    Ok(Bytes::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_uris_and_base64_decode_and_urls_and_paths_are_refused() {
        assert_eq!(
            decode_image_string("data:image/png;base64,AAEC").unwrap(),
            Bytes::from_static(&[0, 1, 2])
        );
        assert_eq!(
            decode_image_string("AAEC").unwrap(),
            Bytes::from_static(&[0, 1, 2])
        );
        // A JPEG's base64 starts with a slash.
        assert_eq!(
            decode_image_string("/9j/").unwrap(),
            Bytes::from_static(&[0xFF, 0xD8, 0xFF])
        );
        for bad in [
            "https://example.com/cat.jpg",
            "/etc/passwd",
            "file:///etc/passwd",
            "data:text/plain,hello",
            "data:image/png;base64",
            "not base64!",
            "",
        ] {
            assert!(decode_image_string(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn local_files_stay_inside_their_folder() {
        let dir = tempfile::tempdir().unwrap();
        let inside = dir.path().join("inside");
        std::fs::create_dir(&inside).unwrap();
        std::fs::write(inside.join("a.png"), b"x").unwrap();
        std::fs::write(dir.path().join("secret.png"), b"x").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(dir.path().join("secret.png"), inside.join("link.png")).unwrap();
        let local = LocalFiles::new(&inside).unwrap();
        let sources = Sources {
            local: Some(&local),
            urls: false,
        };
        assert_eq!(
            image_string("file:a.png", sources).unwrap(),
            ImageInput::File(inside.canonicalize().unwrap().join("a.png"))
        );
        for bad in [
            "file:../secret.png",
            "file:link.png",
            "file:/etc/passwd",
            "file:missing.png",
        ] {
            if bad == "file:link.png" && cfg!(not(unix)) {
                continue;
            }
            assert!(image_string(bad, sources).is_err(), "{bad}");
        }
        // Without the flag, file: is refused outright.
        let refused = image_string("file:a.png", Sources::default()).unwrap_err();
        assert!(refused.contains("not read"), "{refused}");
    }

    #[test]
    fn urls_are_taken_only_when_allowed() {
        let url = "https://example.com/cat.jpg";
        let refused = image_string(url, Sources::default()).unwrap_err();
        assert!(refused.contains("--allow-url-fetch"), "{refused}");
        let allowed = Sources {
            local: None,
            urls: true,
        };
        assert_eq!(
            image_string(url, allowed).unwrap(),
            ImageInput::Url(url.to_string())
        );
        // Data URIs and base64 are still the image itself.
        assert_eq!(
            image_string("AAEC", allowed).unwrap(),
            ImageInput::Bytes(Bytes::from_static(&[0, 1, 2]))
        );
    }
}
