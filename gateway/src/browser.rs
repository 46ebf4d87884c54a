//! Requests that a web page makes a browser send (docs/gateway.md, "Requests from browsers").
//!
//! Queen's clients are programs: they send no `Origin`, `Referer` or `Sec-Fetch-*` header, and
//! they name the gateway by the address they were given. A page on another site can still make
//! its visitor's browser send requests to a gateway that browser can reach, in two ways:
//!
//! - **DNS rebinding.** The page's own host name is made to resolve to the gateway's address;
//!   the browser then takes the gateway for the page's own origin and lets the page read its
//!   answers (dead letters, payloads). Such a request names the page's host in `Host`, so only
//!   the host names of `--allowed-host` and the loopback names are served (`Hosts`); without
//!   authentication that is the default, because every request then acts as the login role.
//! - **Cross-site requests.** The page sends the request to the gateway's real address: a form,
//!   an `<img>` or `<script>` load, a navigation, a `fetch` in `no-cors` mode. The page cannot
//!   read the answer, but the request is made, and a pop takes a lease (with `autoAck`, the
//!   messages are gone). Browsers mark such requests: `Origin` on every cross-origin `fetch`
//!   and every POST, `Sec-Fetch-Site` / `Sec-Fetch-Mode` on every request of a current browser,
//!   `Referer` and `Upgrade-Insecure-Requests` on most loads of older ones. `check_cross_site`
//!   refuses each of those marks unless the origin is one of `--cors-origin`.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::auth::Policy;
use crate::error::ApiError;
use crate::wire::shorten;

/// The host names (`Host` header values) requests are served for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hosts {
    /// None: any host (no allow-list in force).
    names: Option<Vec<HostName>>,
}

/// A host name or address, lower case, IPv6 in brackets, with the port it must come with
/// (None: any port).
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostName {
    host: String,
    port: Option<u16>,
}

impl Hosts {
    /// The allow-list of `--allowed-host` (`listed`). With `restrict` (no authentication) an
    /// empty list still leaves the loopback names; without it (`--auth jwt`, where a browser
    /// never sends the bearer token by itself) an empty list means any host. `*` in the list:
    /// any host, in both modes.
    ///
    /// Whenever a list is in force, the loopback names (`localhost`, `127.0.0.1`, `[::1]` and the
    /// loopback address listened on), with any port, are on it: a rebinding page's host name
    /// is its own, never one of those, and local tools and health checks use them.
    pub fn new(listed: &[String], listen: SocketAddr, restrict: bool) -> Result<Hosts, String> {
        let listed: Vec<&str> = listed.iter().map(|s| s.trim()).filter(|s| !s.is_empty()).collect();
        if listed.contains(&"*") || (listed.is_empty() && !restrict) {
            return Ok(Hosts { names: None });
        }
        let mut names: Vec<HostName> =
            ["localhost", "127.0.0.1", "[::1]"].iter().map(|h| HostName { host: h.to_string(), port: None }).collect();
        if listen.ip().is_loopback() {
            names.push(HostName { host: ip_host(listen.ip()), port: None });
        }
        for entry in listed {
            let name = parse_host(entry, true)
                .ok_or_else(|| format!("--allowed-host \"{entry}\": not a host name, an address, or one with :port"))?;
            names.push(name);
        }
        names.dedup();
        Ok(Hosts { names: Some(names) })
    }

    /// Whether a request's `Host` header (or its URI's authority) is served.
    pub fn allows(&self, host: Option<&str>) -> bool {
        let Some(names) = &self.names else { return true };
        let Some(asked) = host.and_then(|h| parse_host(h, false)) else { return false };
        names.iter().any(|n| n.host == asked.host && (n.port.is_none() || n.port == asked.port))
    }

    pub fn restricted(&self) -> bool {
        self.names.is_some()
    }
}

fn ip_host(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// `name`, `name:port`, `1.2.3.4[:port]`, `[v6][:port]` (and, in the configuration only, a bare
/// IPv6 address), normalised: lower case, no trailing dot, IPv6 addresses in their short form.
fn parse_host(text: &str, config: bool) -> Option<HostName> {
    let text = text.trim().to_ascii_lowercase();
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (addr, after) = rest.split_once(']')?;
        let v6: Ipv6Addr = addr.parse().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?.parse::<u16>().ok()?),
        };
        (format!("[{v6}]"), port)
    } else if config && text.matches(':').count() > 1 {
        (format!("[{}]", text.parse::<Ipv6Addr>().ok()?), None)
    } else {
        match text.split_once(':') {
            Some((h, p)) => (h.to_string(), Some(p.parse::<u16>().ok()?)),
            None => (text.clone(), None),
        }
    };
    let host = host.strip_suffix('.').map(str::to_string).unwrap_or(host);
    let valid = !host.is_empty()
        && (host.starts_with('[')
            || host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')));
    valid.then_some(HostName { host, port })
}

/// A refusal answered before the request's body was read: the connection is closed after it,
/// and says so. The server cannot read the next request on that connection without first
/// reading (or waiting for) the rest of this body, and does not; without the header a client
/// would send its next request on a connection the server is closing, and see it cut off.
pub fn refused(request: &HeaderMap, mut response: Response) -> Response {
    if crate::auth::has_body(request) {
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// The middleware of every route: a request for a host name not served is answered 421 before
/// anything else runs.
pub async fn host_check(State(policy): State<Arc<Policy>>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_string()));
    if !policy.hosts.allows(host.as_deref()) {
        let refusal = ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            match host {
                Some(h) => format!(
                    "requests for host \"{}\" are not served here: list the name the gateway is reached by \
                     with --allowed-host",
                    shorten(&h)
                ),
                None => "a request must name its host (Host header)".to_string(),
            },
        );
        return refused(req.headers(), refusal.into_response());
    }
    next.run(req).await
}

const SEC_FETCH_SITE: HeaderName = HeaderName::from_static("sec-fetch-site");
const SEC_FETCH_MODE: HeaderName = HeaderName::from_static("sec-fetch-mode");
const UPGRADE_INSECURE_REQUESTS: HeaderName = HeaderName::from_static("upgrade-insecure-requests");

/// Refuse a request a browser sent for a page of another site (403), unless it comes from an
/// origin of `--cors-origin`. `changes_state`: the route changes something (every method but GET
/// and HEAD, and a pop, which takes a lease): then a browser's navigation or `no-cors` load is
/// refused whatever its site, since neither can be a page's deliberate, CORS-checked call.
pub fn check_cross_site(headers: &HeaderMap, changes_state: bool, cors_origins: &[String]) -> Result<(), ApiError> {
    let allowed = |origin: &str| cors_origins.iter().any(|a| a == "*" || a == origin);
    let value = |name: &HeaderName| headers.get(name).map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase());
    let refuse = |why: String| {
        Err(ApiError::new(StatusCode::FORBIDDEN, format!("cross-site requests are refused ({why}; see --cors-origin)")))
    };
    // An allowed origin's pages call with fetch in CORS mode, which always sends Origin.
    let origin_ok = match headers.get(header::ORIGIN) {
        None => false,
        Some(o) if o.to_str().is_ok_and(allowed) => true,
        Some(o) => return refuse(format!("the request has Origin \"{}\"", shorten(o.to_str().unwrap_or("?")))),
    };
    if let Some(site) = value(&SEC_FETCH_SITE) {
        // same-origin: the gateway serves no page, and a rebound name is refused by its Host;
        // none: the user typed or bookmarked the address.
        if !matches!(site.as_str(), "same-origin" | "none") && !origin_ok {
            return refuse(format!("Sec-Fetch-Site: {}", shorten(&site)));
        }
    }
    if !changes_state {
        return Ok(());
    }
    if let Some(mode) = value(&SEC_FETCH_MODE) {
        if !matches!(mode.as_str(), "cors" | "same-origin") {
            return refuse(format!(
                "Sec-Fetch-Mode: {}: a browser's navigation or page load may not pop or change anything",
                shorten(&mode)
            ));
        }
    }
    // Browsers from before Sec-Fetch-*: a navigation says Upgrade-Insecure-Requests (a fetch
    // never does), and most loads name the page they came from.
    if headers.contains_key(UPGRADE_INSECURE_REQUESTS) {
        return refuse("a browser's navigation (Upgrade-Insecure-Requests) may not pop or change anything".into());
    }
    if let Some(referer) = headers.get(header::REFERER) {
        let from = referer.to_str().ok().and_then(referer_origin);
        if !from.as_deref().is_some_and(allowed) {
            return refuse(format!(
                "the request was sent from the page \"{}\"",
                shorten(referer.to_str().unwrap_or("?"))
            ));
        }
    }
    Ok(())
}

/// The origin (`scheme://host[:port]`) of a `Referer` URL.
fn referer_origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    (!scheme.is_empty() && !authority.is_empty())
        .then(|| format!("{}://{}", scheme.to_ascii_lowercase(), authority.to_ascii_lowercase()))
}

/// Whether a route changes state: every method but GET and HEAD, and a pop (a GET, as Queen's
/// clients send it, that takes a lease or, with `autoAck`, consumes).
pub fn changes_state(method: &axum::http::Method, route: &str) -> bool {
    !matches!(*method, axum::http::Method::GET | axum::http::Method::HEAD)
        || route == "/api/v1/pop"
        || route.starts_with("/api/v1/pop/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    fn listen(a: &str) -> SocketAddr {
        a.parse().unwrap()
    }

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn without_auth_only_loopback_names_are_served_by_default() {
        let h = Hosts::new(&[], listen("127.0.0.1:6632"), true).unwrap();
        assert!(h.restricted());
        for ok in [
            "localhost",
            "localhost:6632",
            "LOCALHOST:6632",
            "localhost.:6632",
            "127.0.0.1",
            "127.0.0.1:6632",
            "127.0.0.1:9999",
            "[::1]",
            "[::1]:6632",
            "[0:0:0:0:0:0:0:1]:6632",
        ] {
            assert!(h.allows(Some(ok)), "{ok}");
        }
        for refused in [
            "evil.example",
            "evil.example:6632",
            "localhost.evil.example",
            "127.0.0.1.nip.io:6632",
            "127.0.0.2:6632",
            "[::2]:6632",
            "localhost:port",
            "local host",
            "",
            "[::1",
            "::1",
        ] {
            assert!(!h.allows(Some(refused)), "{refused}");
        }
        assert!(!h.allows(None));
        // The loopback address listened on, when it is another one.
        let h = Hosts::new(&[], listen("127.0.0.5:7000"), true).unwrap();
        assert!(h.allows(Some("127.0.0.5:7000")) && h.allows(Some("localhost")));
        let h = Hosts::new(&[], listen("[::1]:7000"), true).unwrap();
        assert!(h.allows(Some("[::1]:7000")));
    }

    #[test]
    fn listed_hosts_are_added_and_ports_kept() {
        let h = Hosts::new(
            &list(&["queen.internal", "proxy.example:8443", "10.0.0.5", "fe80::1"]),
            listen("127.0.0.1:6632"),
            true,
        )
        .unwrap();
        assert!(h.allows(Some("queen.internal")) && h.allows(Some("Queen.Internal:6632")));
        assert!(h.allows(Some("proxy.example:8443")) && !h.allows(Some("proxy.example:8444")));
        assert!(!h.allows(Some("proxy.example")));
        assert!(h.allows(Some("10.0.0.5:6632")) && h.allows(Some("[fe80::1]:6632")));
        assert!(h.allows(Some("localhost:6632")));
        assert!(!h.allows(Some("evil.example")));
        assert!(Hosts::new(&list(&["bad host"]), listen("127.0.0.1:1"), true).is_err());
        assert!(Hosts::new(&list(&["h:99999"]), listen("127.0.0.1:1"), true).is_err());
        assert!(Hosts::new(&list(&["http://h"]), listen("127.0.0.1:1"), true).is_err());
    }

    #[test]
    fn with_auth_an_empty_list_serves_any_host_and_a_list_is_honoured() {
        let any = Hosts::new(&[], listen("0.0.0.0:6632"), false).unwrap();
        assert!(!any.restricted() && any.allows(Some("evil.example")) && any.allows(None));
        let listed = Hosts::new(&list(&["queen.example.com"]), listen("0.0.0.0:6632"), false).unwrap();
        assert!(listed.allows(Some("queen.example.com:6632")) && listed.allows(Some("localhost")));
        assert!(!listed.allows(Some("evil.example")) && !listed.allows(Some("0.0.0.0:6632")));
        // `*` opts out, in both modes.
        assert!(!Hosts::new(&list(&["*"]), listen("127.0.0.1:6632"), true).unwrap().restricted());
    }

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        m
    }

    #[test]
    fn what_queens_clients_send_is_served() {
        let client = h(&[("user-agent", "python-httpx/0.28.1"), ("accept", "*/*"), ("host", "localhost:6632")]);
        for changes in [false, true] {
            assert!(check_cross_site(&client, changes, &[]).is_ok());
        }
    }

    #[test]
    fn cross_site_marks_are_refused_for_every_route() {
        let cases = [
            h(&[("origin", "https://evil.example")]),
            h(&[("origin", "null")]),
            // <img>, <script>, a link followed: no Origin on a GET, but Sec-Fetch-Site.
            h(&[("sec-fetch-site", "cross-site"), ("sec-fetch-mode", "no-cors"), ("sec-fetch-dest", "image")]),
            h(&[("sec-fetch-site", "cross-site"), ("sec-fetch-mode", "navigate")]),
            h(&[("sec-fetch-site", "same-site"), ("sec-fetch-mode", "no-cors")]),
            h(&[("sec-fetch-site", "CROSS-SITE")]),
        ];
        for headers in cases {
            for changes in [false, true] {
                let e = check_cross_site(&headers, changes, &[]).unwrap_err();
                assert_eq!(e.status, 403, "{headers:?}");
                assert!(e.message.contains("cross-site"), "{}", e.message);
            }
        }
    }

    #[test]
    fn navigations_and_page_loads_never_change_state() {
        let cases = [
            // Typed into the address bar, or a bookmark.
            h(&[("sec-fetch-site", "none"), ("sec-fetch-mode", "navigate"), ("sec-fetch-dest", "document")]),
            h(&[("sec-fetch-site", "same-origin"), ("sec-fetch-mode", "no-cors")]),
            // A browser from before Sec-Fetch-*: a navigation, an <img> with its Referer.
            h(&[("upgrade-insecure-requests", "1")]),
            h(&[("referer", "https://evil.example/page.html")]),
            h(&[("referer", "not a url")]),
        ];
        for headers in cases {
            assert!(check_cross_site(&headers, false, &[]).is_ok(), "a read: {headers:?}");
            assert_eq!(check_cross_site(&headers, true, &[]).unwrap_err().status, 403, "{headers:?}");
        }
    }

    #[test]
    fn an_allowed_origin_is_served() {
        let cors = list(&["https://ops.example"]);
        let fetch = h(&[
            ("origin", "https://ops.example"),
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-mode", "cors"),
            ("referer", "https://ops.example/queues?x=1"),
        ]);
        for changes in [false, true] {
            assert!(check_cross_site(&fetch, changes, &cors).is_ok());
        }
        // The same page's <img> (no Origin) or a navigation does not become allowed.
        let img =
            h(&[("sec-fetch-site", "cross-site"), ("sec-fetch-mode", "no-cors"), ("referer", "https://ops.example/")]);
        assert!(check_cross_site(&img, false, &cors).is_err());
        let nav =
            h(&[("origin", "https://ops.example"), ("sec-fetch-site", "cross-site"), ("sec-fetch-mode", "navigate")]);
        assert!(check_cross_site(&nav, false, &cors).is_ok());
        assert!(check_cross_site(&nav, true, &cors).is_err());
        let other = h(&[("origin", "https://ops.example"), ("referer", "https://evil.example/")]);
        assert!(check_cross_site(&other, true, &cors).is_err());
        assert!(check_cross_site(&h(&[("origin", "https://x.example")]), true, &list(&["*"])).is_ok());
    }

    #[test]
    fn referer_origins() {
        assert_eq!(referer_origin("https://Ops.Example:8443/a/b?c#d").as_deref(), Some("https://ops.example:8443"));
        assert_eq!(referer_origin("http://u:p@h.example/x").as_deref(), Some("http://h.example"));
        assert_eq!(referer_origin("about:blank"), None);
    }

    #[test]
    fn which_routes_change_state() {
        for (m, r) in [
            (Method::GET, "/api/v1/pop/queue/{queue}"),
            (Method::GET, "/api/v1/pop/queue/{queue}/partition/{partition}"),
            (Method::GET, "/api/v1/pop"),
            (Method::POST, "/api/v1/push"),
            (Method::DELETE, "/api/v1/resources/queues/{queue}"),
            (Method::PUT, "/api/v1/anything"),
        ] {
            assert!(changes_state(&m, r), "{m} {r}");
        }
        for (m, r) in [
            (Method::GET, "/api/v1/dlq"),
            (Method::GET, "/api/v1/resources/queues"),
            (Method::GET, "/api/v1/messages/{partition}/{transaction}"),
            (Method::GET, "/api/v1/timers/{queue}"),
            (Method::HEAD, "/api/v1/consumer-groups"),
            (Method::GET, "/api/v1/popular"),
        ] {
            assert!(!changes_state(&m, r), "{m} {r}");
        }
    }
}
