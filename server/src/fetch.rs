//! Images named by URL (`http://` or `https://`), fetched only under `--allow-url-fetch`: each
//! fetch bounded in bytes (the image limits' `--max-file-size`) and in time
//! (`--url-fetch-timeout-ms`, the whole exchange, redirects included), at most 5 redirects.
//! By default only public addresses are fetched from: a name that resolves to a loopback,
//! private, link-local or other non-public address is refused, at every redirect too (the
//! check is in the resolver every connection goes through), so a request cannot make the
//! server read an internal service; `--allow-url-fetch any` lifts that for a trusted network.

use std::io::Read;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// Which addresses URLs may lead to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Public addresses only.
    Public,
    /// Any address, loopback and private networks included.
    Any,
}

/// What `--allow-url-fetch` and its limits say.
#[derive(Clone, Copy, Debug)]
pub struct FetchOptions {
    pub reach: Reach,
    /// Largest body read; a larger one is refused (no more than this plus one byte is read).
    pub max_bytes: u64,
    /// The whole fetch, redirects included.
    pub timeout: Duration,
}

/// Fetches images by URL (blocking: call it on a blocking thread).
pub struct UrlFetcher {
    agent: ureq::Agent,
    max_bytes: u64,
}

/// Resolves names as the system does, keeping only the addresses `reach` allows.
struct GuardedResolver {
    reach: Reach,
}

impl ureq::Resolver for GuardedResolver {
    fn resolve(&self, netloc: &str) -> std::io::Result<Vec<SocketAddr>> {
        let found: Vec<SocketAddr> = netloc.to_socket_addrs()?.collect();
        if self.reach == Reach::Any {
            return Ok(found);
        }
        let public: Vec<SocketAddr> = found
            .iter()
            .copied()
            .filter(|a| is_public(a.ip()))
            .collect();
        if public.is_empty() && !found.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{netloc} is not a public address ({}): the server fetches only from public \
                     addresses unless started with --allow-url-fetch any",
                    found[0].ip()
                ),
            ));
        }
        Ok(public)
    }
}

/// Whether `ip` is a public unicast address: not loopback, private, link-local, shared
/// (carrier-grade NAT), unspecified, broadcast, multicast, documentation or unique-local.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 198 && (18..20).contains(&b))
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || first == 0x2001 && v6.segments()[1] == 0x0db8)
        }
    }
}

impl UrlFetcher {
    pub fn new(options: FetchOptions) -> UrlFetcher {
        let agent = ureq::AgentBuilder::new()
            .timeout(options.timeout)
            .redirects(5)
            .user_agent(concat!("vitrt-serve/", env!("CARGO_PKG_VERSION")))
            .resolver(GuardedResolver {
                reach: options.reach,
            })
            .build();
        UrlFetcher {
            agent,
            max_bytes: options.max_bytes,
        }
    }

    /// The body `url` answers with, or why not (a message for a 400).
    pub fn fetch(&self, url: &str) -> Result<Vec<u8>, String> {
        let response = self.agent.get(url).call().map_err(|e| match e {
            ureq::Error::Status(code, _) => format!("{url} answered HTTP {code}"),
            ureq::Error::Transport(transport) => format!("fetching {url}: {transport}"),
        })?;
        let limit = self.max_bytes;
        if let Some(length) = response
            .header("Content-Length")
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            if length > limit {
                return Err(format!(
                    "{url} is {length} bytes, more than the limit of {limit} (--max-file-size)"
                ));
            }
        }
        let mut body = Vec::new();
        response
            .into_reader()
            .take(limit + 1)
            .read_to_end(&mut body)
            .map_err(|e| format!("reading {url}: {e}"))?;
        if body.len() as u64 > limit {
            return Err(format!(
                "{url} is more than the limit of {limit} bytes (--max-file-size)"
            ));
        }
        if body.is_empty() {
            return Err(format!("{url} answered an empty body"));
        }
        Ok(body)
    }
}

/// Whether `text` names an image by URL (what [`UrlFetcher::fetch`] takes).
pub fn is_url(text: &str) -> bool {
    let lower = text.get(..8).unwrap_or(text).to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    /// A one-connection-at-a-time HTTP server on loopback answering every request with
    /// `answer(path)`: (status line, body, delay before answering).
    fn server(answer: fn(&str) -> (&'static str, Vec<u8>, Duration)) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut request = [0u8; 4096];
                let n = stream.read(&mut request).unwrap_or(0);
                let line = String::from_utf8_lossy(&request[..n]).to_string();
                let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
                let (status, body, delay) = answer(&path);
                std::thread::sleep(delay);
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body);
            }
        });
        format!("http://{address}")
    }

    fn answer(path: &str) -> (&'static str, Vec<u8>, Duration) {
        match path {
            "/image.png" => ("200 OK", b"an image".to_vec(), Duration::ZERO),
            "/large.png" => ("200 OK", vec![7u8; 5000], Duration::ZERO),
            "/slow.png" => ("200 OK", b"late".to_vec(), Duration::from_secs(3)),
            _ => ("404 Not Found", b"no".to_vec(), Duration::ZERO),
        }
    }

    fn fetcher(reach: Reach) -> UrlFetcher {
        UrlFetcher::new(FetchOptions {
            reach,
            max_bytes: 1000,
            timeout: Duration::from_millis(500),
        })
    }

    #[test]
    fn fetches_within_its_limits_and_says_why_not() {
        let base = server(answer);
        let any = fetcher(Reach::Any);
        assert_eq!(
            any.fetch(&format!("{base}/image.png")).unwrap(),
            b"an image"
        );
        let missing = any.fetch(&format!("{base}/missing.png")).unwrap_err();
        assert!(missing.contains("HTTP 404"), "{missing}");
        let large = any.fetch(&format!("{base}/large.png")).unwrap_err();
        assert!(large.contains("limit of 1000"), "{large}");
        let started = std::time::Instant::now();
        let slow = any.fetch(&format!("{base}/slow.png")).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2), "{slow}");
        let refused = any.fetch("ftp://127.0.0.1/image.png").unwrap_err();
        assert!(refused.contains("ftp"), "{refused}");
    }

    #[test]
    fn public_reach_refuses_loopback_and_private_addresses() {
        let base = server(answer);
        let public = fetcher(Reach::Public);
        let refused = public.fetch(&format!("{base}/image.png")).unwrap_err();
        assert!(
            refused.contains("not a public address") && refused.contains("--allow-url-fetch any"),
            "{refused}"
        );
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "8.8.8.8", "2606:4700::1111"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn urls_are_told_from_images() {
        assert!(is_url("https://example.com/a.jpg"));
        assert!(is_url("HTTP://example.com/a.jpg"));
        assert!(!is_url("data:image/png;base64,AAEC"));
        assert!(!is_url("/9j/4AAQ"));
        assert!(!is_url("file:a.png"));
    }
}
