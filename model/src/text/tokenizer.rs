//! The text tokenizer of a CLIP or SigLIP checkpoint, read from its `tokenizer.json` with the
//! Hugging Face `tokenizers` crate (or, for a SigLIP checkpoint that ships none, rebuilt from
//! SentencePiece's `spiece.model` as transformers' slow `SiglipTokenizer` tokenizes: see
//! `spiece.rs`), and set up to give the ids transformers' tokenizer gives with
//! `padding="max_length", truncation=True, max_length=context`: every text is truncated so that it and its special tokens fit in `context` (the end token is kept), then
//! padded with the checkpoint's pad token to exactly `context` ids, on the side its tokenizer
//! config names (its tokenizer class's default where it names none: the right, but the left
//! for Gemma's, which SigLIP 2 ships).

use std::path::{Path, PathBuf};

use serde_json::Value;
use tokenizers::{
    PaddingDirection, PaddingParams, PaddingStrategy, PostProcessor, Tokenizer,
    TruncationDirection, TruncationParams, TruncationStrategy,
};

use std::fmt;

use super::config::TextFamily;
use super::spiece::{siglip_text, siglip_tokenizer, SpieceModel};
use crate::error::ModelError;

/// Token ids of a batch of texts, each padded to the same context length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBatch {
    /// `[texts, context]`, row-major.
    pub ids: Vec<u32>,
    /// The number of real tokens of each text (special tokens included) before its padding.
    pub lengths: Vec<usize>,
    pub context: usize,
}

impl TokenBatch {
    /// The number of texts.
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// The `context` ids of text `index`.
    pub fn row(&self, index: usize) -> &[u32] {
        &self.ids[index * self.context..(index + 1) * self.context]
    }
}

/// Bytes of a text that are tokenized per token of the context: a text is cut to
/// `context * BYTES_PER_TOKEN` bytes before it is tokenized, so that a label of megabytes
/// costs what one of a few kilobytes does (tokenized whole, 10 MB took 1.4-2.1 GB and 8-28 s).
/// Every token covers at least one byte of the text and no vocabulary entry comes near 64
/// bytes, so the cut changes no token the context keeps, unless the text's first tokens sit
/// among more than 64 bytes a token of characters the tokenizer drops (runs of spaces,
/// punctuation for SigLIP).
pub const BYTES_PER_TOKEN: usize = 64;

/// `text` cut to what `context` tokens can come from (see [`BYTES_PER_TOKEN`]), at a
/// character boundary.
pub fn cut_for_context(text: &str, context: usize) -> &str {
    let limit = context.saturating_mul(BYTES_PER_TOKEN);
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A checkpoint's tokenizer, truncating and padding to a fixed context.
pub struct TextTokenizer {
    tokenizer: Tokenizer,
    family: TextFamily,
    context: usize,
    pad_id: u32,
    end_id: u32,
    path: PathBuf,
    /// The tokenizer built from spiece.model: texts go in as `siglip_text` makes them, and
    /// one whose tokens already end with `</s>` gets no second one.
    siglip_prefix: bool,
}

impl fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("path", &self.path)
            .field("family", &self.family)
            .field("context", &self.context)
            .field("pad_id", &self.pad_id)
            .field("end_id", &self.end_id)
            .finish()
    }
}

impl TextTokenizer {
    /// Reads `dir/tokenizer.json` (for SigLIP, `dir/spiece.model` when there is no
    /// tokenizer.json, as released SigLIP checkpoints ship), and the pad token from `dir/tokenizer_config.json` or
    /// `dir/special_tokens_map.json` as transformers resolves it (the family's default when
    /// neither names one). `context` is the text tower's sequence length (its
    /// `max_position_embeddings`).
    pub fn from_checkpoint(
        dir: &Path,
        context: usize,
        family: TextFamily,
    ) -> Result<TextTokenizer, ModelError> {
        let path = dir.join("tokenizer.json");
        let spiece = dir.join("spiece.model");
        let reads_spiece_model = family.rules().reads_spiece_model;
        let siglip_prefix = !path.is_file() && reads_spiece_model;
        let (mut tokenizer, path) = if path.is_file() {
            let tokenizer = Tokenizer::from_file(&path)
                .map_err(|e| tokenizer_error(&path, format!("not a readable tokenizer: {e}")))?;
            (tokenizer, path)
        } else if reads_spiece_model && spiece.is_file() {
            // Released SigLIP checkpoints ship SentencePiece's model file alone.
            (sentencepiece_tokenizer(dir, &spiece, family)?, spiece)
        } else {
            let sentencepiece = if spiece.is_file() {
                " (this one has spiece.model, SentencePiece's file, which vitrt reads for SigLIP \
                 checkpoints only)"
            } else {
                ""
            };
            return Err(tokenizer_error(
                &path,
                format!(
                    "no tokenizer.json in {}; zero-shot classification and text embeddings need \
                     the checkpoint's fast tokenizer file{sentencepiece}",
                    dir.display()
                ),
            ));
        };

        // The family's first tokenizer whose end token is in the vocabulary is this one
        // (SigLIP: SentencePiece's `</s>`, or Gemma's `<eos>` in SigLIP 2's checkpoints).
        let vocabularies = family.vocabularies();
        let Some((tokens, end_id)) = vocabularies.iter().find_map(|tokens| {
            tokenizer
                .token_to_id(tokens.end)
                .map(|end_id| (tokens, end_id))
        }) else {
            let ends: Vec<&str> = vocabularies.iter().map(|tokens| tokens.end).collect();
            return Err(tokenizer_error(
                &path,
                format!(
                    "no {} token in the vocabulary: not a {family} tokenizer",
                    ends.join(" or ")
                ),
            ));
        };
        let (pad_token, pad_id) = match family.rules().pad_id {
            // The family's tokenizer pads with this id whatever the tokenizer files say
            // (open_clip's pads with 0).
            Some(id) => {
                let token = tokenizer.id_to_token(id).ok_or_else(|| {
                    tokenizer_error(
                        &path,
                        format!("the {family} pad id {id} is not in the vocabulary"),
                    )
                })?;
                (token, id)
            }
            None => {
                let pad_token = match pad_token_of(dir)? {
                    Some(token) => token,
                    None => tokens.default_pad.to_string(),
                };
                let pad_id = tokenizer.token_to_id(&pad_token).ok_or_else(|| {
                    tokenizer_error(
                        &path,
                        format!("the pad token {pad_token:?} is not in the vocabulary"),
                    )
                })?;
                (pad_token, pad_id)
            }
        };
        let padding_direction = if siglip_prefix {
            // SiglipTokenizer pads on the right.
            PaddingDirection::Right
        } else {
            padding_side_of(dir)?
        };

        let special = tokenizer
            .get_post_processor()
            .map_or(0, |processor| processor.added_tokens(false));
        if context <= special {
            return Err(tokenizer_error(
                &path,
                format!(
                    "a context of {context} tokens leaves no room for text beside the {special} \
                     special tokens"
                ),
            ));
        }
        tokenizer
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length: context,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|e| tokenizer_error(&path, format!("truncation to {context}: {e}")))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::Fixed(context),
            direction: padding_direction,
            pad_to_multiple_of: None,
            pad_id,
            pad_type_id: 0,
            pad_token,
        }));
        Ok(TextTokenizer {
            tokenizer,
            family,
            context,
            pad_id,
            end_id,
            path,
            siglip_prefix,
        })
    }

    /// The ids of `texts`, each with its special tokens, truncated to the context and padded
    /// to it. A text is cut to [`BYTES_PER_TOKEN`] bytes a token of the context first.
    pub fn encode(&self, texts: &[String]) -> Result<TokenBatch, ModelError> {
        let mut ids = Vec::with_capacity(texts.len() * self.context);
        let mut lengths = Vec::with_capacity(texts.len());
        for (index, text) in texts.iter().enumerate() {
            let text = cut_for_context(text, self.context);
            let input = if self.siglip_prefix {
                siglip_text(text)
            } else {
                text.to_string()
            };
            let encoding = self.tokenizer.encode(input, true).map_err(|e| {
                tokenizer_error(&self.path, format!("text {index} ({text:?}): {e}"))
            })?;
            if encoding.get_ids().len() != self.context {
                return Err(tokenizer_error(
                    &self.path,
                    format!(
                        "text {index} ({text:?}) came out as {} tokens, not the context's {}",
                        encoding.get_ids().len(),
                        self.context
                    ),
                ));
            }
            let mut row = encoding.get_ids().to_vec();
            let mut length = encoding
                .get_attention_mask()
                .iter()
                .filter(|&&m| m != 0)
                .count();
            // SiglipTokenizer appends `</s>` only when the (truncated) text's tokens do not
            // already end with one, a `</s>` written at the end of the text.
            if self.siglip_prefix
                && length >= 2
                && row[length - 2] == self.end_id
                && row[length - 1] == self.end_id
            {
                row[length - 1] = self.pad_id;
                length -= 1;
            }
            ids.extend_from_slice(&row);
            lengths.push(length);
        }
        Ok(TokenBatch {
            ids,
            lengths,
            context: self.context,
        })
    }

    pub fn family(&self) -> TextFamily {
        self.family
    }

    pub fn context(&self) -> usize {
        self.context
    }

    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// The id of the family's end token (`<|endoftext|>`, `</s>`).
    pub fn end_id(&self) -> u32 {
        self.end_id
    }

    /// The size of the vocabulary, added tokens included: every id is below it.
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }
}

/// The tokenizer transformers' slow `SiglipTokenizer` makes of `spiece`, with the
/// checkpoint's pad token and `do_lower_case` (both SiglipTokenizer's defaults when its
/// tokenizer files name none).
fn sentencepiece_tokenizer(
    dir: &Path,
    spiece: &Path,
    family: TextFamily,
) -> Result<Tokenizer, ModelError> {
    let bytes =
        std::fs::read(spiece).map_err(|e| tokenizer_error(spiece, format!("cannot read: {e}")))?;
    let model = SpieceModel::parse(&bytes)
        .map_err(|e| tokenizer_error(spiece, format!("not a readable SentencePiece model: {e}")))?;
    let pad_token = match pad_token_of(dir)? {
        Some(token) => token,
        None => family.vocabularies()[0].default_pad.to_string(),
    };
    let config_path = dir.join("tokenizer_config.json");
    let lowercase = match read_json_if_present(&config_path)? {
        Some((_, json)) => match json.get("do_lower_case") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(lower)) => *lower,
            Some(other) => {
                return Err(tokenizer_error(
                    &config_path,
                    format!("do_lower_case is not a boolean: {other}"),
                ))
            }
        },
        None => true,
    };
    siglip_tokenizer(&model, lowercase, family.end_token(), &pad_token)
        .map_err(|e| tokenizer_error(spiece, e))
}

fn tokenizer_error(path: &Path, message: String) -> ModelError {
    ModelError::Tokenizer {
        path: path.display().to_string(),
        message,
    }
}

/// The pad token the checkpoint's tokenizer files name, if any, as transformers 5 resolves
/// it: `tokenizer_config.json`'s, except that a legacy config (one without
/// `added_tokens_decoder`, written before transformers 4.34) lets `special_tokens_map.json`
/// override it.
fn pad_token_of(dir: &Path) -> Result<Option<String>, ModelError> {
    let config = read_json_if_present(&dir.join("tokenizer_config.json"))?;
    let legacy = config
        .as_ref()
        .is_none_or(|(_, json)| json.get("added_tokens_decoder").is_none());
    if legacy {
        if let Some((path, json)) = read_json_if_present(&dir.join("special_tokens_map.json"))? {
            if let Some(token) = pad_token_field(&path, &json)? {
                return Ok(Some(token));
            }
        }
    }
    match config {
        Some((path, json)) => pad_token_field(&path, &json),
        None => Ok(None),
    }
}

/// The side transformers pads the checkpoint's texts on: `tokenizer_config.json`'s
/// `padding_side`, else its tokenizer class's default (Gemma's tokenizers pad on the left,
/// every other class these families ship on the right).
fn padding_side_of(dir: &Path) -> Result<PaddingDirection, ModelError> {
    let Some((path, json)) = read_json_if_present(&dir.join("tokenizer_config.json"))? else {
        return Ok(PaddingDirection::Right);
    };
    match json.get("padding_side") {
        Some(Value::String(side)) if side == "right" => Ok(PaddingDirection::Right),
        Some(Value::String(side)) if side == "left" => Ok(PaddingDirection::Left),
        None | Some(Value::Null) => {
            let class = json.get("tokenizer_class").and_then(Value::as_str);
            let left = matches!(
                class,
                Some("GemmaTokenizer" | "GemmaTokenizerFast" | "Siglip2Tokenizer")
            );
            Ok(if left {
                PaddingDirection::Left
            } else {
                PaddingDirection::Right
            })
        }
        Some(other) => Err(tokenizer_error(
            &path,
            format!("padding_side is neither \"left\" nor \"right\": {other}"),
        )),
    }
}

fn read_json_if_present(path: &Path) -> Result<Option<(PathBuf, Value)>, ModelError> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| tokenizer_error(path, format!("cannot read: {e}")))?;
    let json = serde_json::from_str(&text)
        .map_err(|e| tokenizer_error(path, format!("not valid JSON: {e}")))?;
    Ok(Some((path.to_path_buf(), json)))
}

/// The `pad_token` field of a tokenizer config: a token's text, or an AddedToken object with
/// a "content" field; absent or null when the tokenizer has none.
fn pad_token_field(path: &Path, json: &Value) -> Result<Option<String>, ModelError> {
    match json.get("pad_token") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(token)) => Ok(Some(token.clone())),
        Some(Value::Object(token)) => match token.get("content") {
            Some(Value::String(content)) => Ok(Some(content.clone())),
            _ => Err(tokenizer_error(
                path,
                "pad_token is an object without a \"content\" string".to_string(),
            )),
        },
        Some(other) => Err(tokenizer_error(
            path,
            format!("pad_token is neither a string nor an object: {other}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    fn message(result: Result<TextTokenizer, ModelError>) -> String {
        match result {
            Ok(tokenizer) => panic!("expected an error, got {tokenizer:?}"),
            Err(error) => error.to_string(),
        }
    }

    /// A word-level tokenizer.json with a `</s>` appended to every text: the smallest file
    /// that exercises the loading, truncation and padding paths.
    const WORD_LEVEL: &str = r#"{
        "version": "1.0",
        "added_tokens": [
            {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false,
             "rstrip": false, "normalized": false, "special": true},
            {"id": 1, "content": "</s>", "single_word": false, "lstrip": false,
             "rstrip": false, "normalized": false, "special": true},
            {"id": 2, "content": "<pad>", "single_word": false, "lstrip": false,
             "rstrip": false, "normalized": false, "special": true}
        ],
        "normalizer": null,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}
        },
        "decoder": null,
        "model": {"type": "WordLevel", "unk_token": "<unk>",
                  "vocab": {"<unk>": 0, "</s>": 1, "<pad>": 2, "a": 3, "cat": 4, "dog": 5}}
    }"#;

    #[test]
    fn missing_tokenizer_json_names_the_folder_and_the_need() {
        let dir = tempfile::tempdir().unwrap();
        let text = message(TextTokenizer::from_checkpoint(
            dir.path(),
            8,
            TextFamily::Siglip,
        ));
        assert!(text.contains(&dir.path().display().to_string()), "{text}");
        assert!(text.contains("no tokenizer.json"), "{text}");
        assert!(text.contains("zero-shot"), "{text}");
        assert!(!text.contains("spiece.model"), "{text}");

        // A CLIP checkpoint's spiece.model is not read; a SigLIP one's is, and an empty one
        // says so.
        write(dir.path(), "spiece.model", "");
        let text = message(TextTokenizer::from_checkpoint(
            dir.path(),
            8,
            TextFamily::Clip,
        ));
        assert!(text.contains("has spiece.model"), "{text}");
        let text = message(TextTokenizer::from_checkpoint(
            dir.path(),
            8,
            TextFamily::Siglip,
        ));
        assert!(text.contains("spiece.model"), "{text}");
        assert!(
            text.contains("not a readable SentencePiece model"),
            "{text}"
        );
    }

    #[test]
    fn malformed_tokenizer_json_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["", "{", "[1, 2]", r#"{"model": {"type": "NoSuchModel"}}"#] {
            write(dir.path(), "tokenizer.json", bad);
            let text = message(TextTokenizer::from_checkpoint(
                dir.path(),
                8,
                TextFamily::Clip,
            ));
            assert!(text.contains("tokenizer.json"), "{bad:?}: {text}");
            assert!(text.contains("not a readable tokenizer"), "{bad:?}: {text}");
        }
    }

    #[test]
    fn a_tokenizer_without_the_family_end_token_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "tokenizer.json", WORD_LEVEL);
        let text = message(TextTokenizer::from_checkpoint(
            dir.path(),
            8,
            TextFamily::Clip,
        ));
        assert!(text.contains("<|endoftext|>"), "{text}");
        assert!(text.contains("not a CLIP tokenizer"), "{text}");
    }

    #[test]
    fn malformed_or_unknown_pad_token_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "tokenizer.json", WORD_LEVEL);
        write(dir.path(), "tokenizer_config.json", "{ not json");
        let text = message(TextTokenizer::from_checkpoint(
            dir.path(),
            8,
            TextFamily::Siglip,
        ));
        assert!(
            text.contains("tokenizer_config.json: not valid JSON"),
            "{text}"
        );

        write(dir.path(), "tokenizer_config.json", r#"{"pad_token": 7}"#);
        let text = message(TextTokenizer::from_checkpoint(
            dir.path(),
            8,
            TextFamily::Siglip,
        ));
        assert!(text.contains("neither a string nor an object"), "{text}");

        write(
            dir.path(),
            "tokenizer_config.json",
            r#"{"pad_token": "<nothing>"}"#,
        );
        let text = message(TextTokenizer::from_checkpoint(
            dir.path(),
            8,
            TextFamily::Siglip,
        ));
        assert!(
            text.contains("\"<nothing>\" is not in the vocabulary"),
            "{text}"
        );
    }

    #[test]
    fn the_pad_token_is_resolved_as_transformers_resolves_it() {
        let dir = tempfile::tempdir().unwrap();
        let pad_id = |dir: &Path| {
            TextTokenizer::from_checkpoint(dir, 8, TextFamily::Siglip)
                .unwrap()
                .pad_id()
        };
        write(dir.path(), "tokenizer.json", WORD_LEVEL);
        // Neither file: the family's default, </s>.
        assert_eq!(pad_id(dir.path()), 1);
        // A legacy config: special_tokens_map.json overrides it.
        write(
            dir.path(),
            "tokenizer_config.json",
            r#"{"pad_token": "</s>"}"#,
        );
        write(
            dir.path(),
            "special_tokens_map.json",
            r#"{"pad_token": "<pad>"}"#,
        );
        assert_eq!(pad_id(dir.path()), 2);
        // A config with added_tokens_decoder: its own pad token counts.
        write(
            dir.path(),
            "tokenizer_config.json",
            r#"{"pad_token": "<unk>", "added_tokens_decoder": {}}"#,
        );
        assert_eq!(pad_id(dir.path()), 0);
    }

    #[test]
    fn a_context_without_room_for_text_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "tokenizer.json", WORD_LEVEL);
        let text = message(TextTokenizer::from_checkpoint(
            dir.path(),
            1,
            TextFamily::Siglip,
        ));
        assert!(text.contains("leaves no room"), "{text}");
    }

    #[test]
    fn texts_are_truncated_keeping_the_end_token_and_padded() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "tokenizer.json", WORD_LEVEL);
        write(
            dir.path(),
            "tokenizer_config.json",
            r#"{"pad_token": {"content": "<pad>", "special": true}}"#,
        );
        let tokenizer = TextTokenizer::from_checkpoint(dir.path(), 4, TextFamily::Siglip).unwrap();
        assert_eq!((tokenizer.pad_id(), tokenizer.end_id()), (2, 1));
        let texts = ["a cat", "", "a dog a cat a dog", "bird"].map(String::from);
        let batch = tokenizer.encode(&texts).unwrap();
        assert_eq!(batch.len(), 4);
        assert_eq!(batch.row(0), [3, 4, 1, 2]);
        assert_eq!(batch.row(1), [1, 2, 2, 2]);
        assert_eq!(batch.row(2), [3, 5, 3, 1]);
        assert_eq!(batch.row(3), [0, 1, 2, 2]);
        assert_eq!(batch.lengths, [3, 1, 4, 2]);
        assert!(tokenizer.encode(&[]).unwrap().is_empty());
    }

    #[test]
    fn a_text_of_megabytes_is_cut_before_it_is_tokenized() {
        assert_eq!(cut_for_context("a cat", 1), "a cat");
        let accented = "é".repeat(100);
        let cut = cut_for_context(&accented, 1);
        assert_eq!(cut.len(), 64, "cut at a character boundary");
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "tokenizer.json", WORD_LEVEL);
        write(
            dir.path(),
            "tokenizer_config.json",
            r#"{"pad_token": {"content": "<pad>", "special": true}}"#,
        );
        let tokenizer = TextTokenizer::from_checkpoint(dir.path(), 4, TextFamily::Siglip).unwrap();
        // 30 MB of words: tokenized whole, seconds and gigabytes; cut, 256 bytes.
        let huge = "a cat ".repeat(5 << 20);
        let started = std::time::Instant::now();
        let batch = tokenizer.encode(&[huge]).unwrap();
        assert_eq!(batch.row(0), [3, 4, 3, 1]);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }
}
