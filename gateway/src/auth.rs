//! Who a request acts as (docs/gateway.md, "Authentication").
//!
//! With `--auth jwt`, every `/api/v1` request carries `Authorization: Bearer <JWT>` as Queen's
//! clients send it: HS256/384/512 with a shared secret, or RS256/384/512, PS256/384/512,
//! ES256/384 and EdDSA with public keys from a JWKS file or URL. A claim (`--jwt-role-claim`,
//! `role` by default) names the PostgreSQL role the request runs as: db.rs switches the
//! connection to it before the request's first statement, so queen's own privileges
//! (`queen_grant`) decide what each token may do. A token acts only as a member role of the
//! gateway's login role, never as the login role itself (whose grants are those of every role
//! it serves) nor a superuser: `none` and the login role's name are refused here, the rest by
//! db.rs as it switches. With `--auth none` every request acts as the login role; the gateway
//! then listens on a loopback address only (main.rs).
//!
//! Requests a web page makes a browser send are refused before that (browser.rs): a `Host` not
//! served, and a cross-site request unless its origin is one of `--cors-origin`. A body that is
//! not JSON is refused too (a browser sends a form or `text/plain` POST without asking first).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use crate::browser::{self, Hosts};
use crate::error::ApiError;

/// The identity a request acts as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The PostgreSQL role to act as; None: the gateway's login role.
    pub role: Option<String>,
    /// Who it is, for per-caller limits: the token's subject (or role), or without
    /// authentication the client id the request declares (`CLIENT_ID`). None: no one in
    /// particular, and no per-caller limit applies (the pools' sizes still do).
    pub key: Option<String>,
}

impl Caller {
    /// The gateway itself (its health check).
    pub fn gateway() -> Caller {
        Caller { role: None, key: None }
    }
}

/// The header a client names itself by when there is no token (`Queen(url, headers={...})` in
/// Queen's clients). Without authentication every caller acts as the login role from a loopback
/// address, so neither the role nor the address tells two clients apart.
pub const CLIENT_ID: HeaderName = HeaderName::from_static("x-queen-client-id");

/// Who a request without authentication is, for per-caller limits: its client id when it sends
/// one (1 to 128 visible ASCII characters), else no one in particular. A client id is only
/// declared, so the limit it keys is fairness between cooperating clients, not a defence against
/// a hostile one (which, without authentication, acts as the login role anyway).
pub fn anonymous_caller(headers: &HeaderMap) -> Result<Caller, ApiError> {
    let Some(value) = headers.get(CLIENT_ID) else { return Ok(Caller { role: None, key: None }) };
    let id = value
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|id| (1..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic()));
    match id {
        Some(id) => Ok(Caller { role: None, key: Some(format!("client:{id}")) }),
        None => {
            Err(ApiError::bad_request(format!("{CLIENT_ID} must be 1 to 128 visible ASCII characters (no spaces)")))
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Caller, ApiError> {
        // Set by `guard` on every route it covers; a route outside it acts as the gateway.
        Ok(parts.extensions.get::<Caller>().cloned().unwrap_or_else(Caller::gateway))
    }
}

/// How tokens are checked.
pub struct Verifier {
    secret: Option<DecodingKey>,
    jwks: Option<Jwks>,
    role_claim: String,
    audience: Option<String>,
    issuer: Option<String>,
    /// The gateway's login role (`session_user`), which no token may name.
    login_role: Option<String>,
}

/// Public keys by `kid`, from a file (read once) or a URL (read at start, again every 10
/// minutes, and — at most once a minute — when a token names a key not known yet).
struct Jwks {
    url: Option<String>,
    keys: RwLock<Vec<(Option<String>, Algorithm, DecodingKey)>>,
    fetched: Mutex<Instant>,
}

const JWKS_REFRESH: Duration = Duration::from_secs(600);
const JWKS_UNKNOWN_KID_REFRESH: Duration = Duration::from_secs(60);

#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No token: 401.
    Missing,
    /// A token that is not valid: 401.
    Invalid(String),
    /// A valid token whose role this gateway never acts as: 403.
    Forbidden(String),
}

impl Verifier {
    pub fn new(
        secret: Option<&str>,
        jwks_file: Option<&str>,
        jwks_url: Option<&str>,
        role_claim: &str,
        audience: Option<&str>,
        issuer: Option<&str>,
    ) -> Result<Verifier, String> {
        if secret.is_none() && jwks_file.is_none() && jwks_url.is_none() {
            return Err("--auth jwt needs a key: --jwt-secret, --jwks-file or --jwks-url".into());
        }
        if jwks_file.is_some() && jwks_url.is_some() {
            return Err("give --jwks-file or --jwks-url, not both".into());
        }
        if let Some(s) = secret {
            if s.len() < 32 {
                return Err(format!(
                    "--jwt-secret must be at least 32 bytes (got {}): HS256 keys are guessable below that",
                    s.len()
                ));
            }
        }
        let jwks = match (jwks_file, jwks_url) {
            (Some(path), _) => {
                let text = std::fs::read_to_string(path).map_err(|e| format!("--jwks-file {path}: {e}"))?;
                Some(Jwks { url: None, keys: RwLock::new(parse_jwks(&text)?), fetched: Mutex::new(Instant::now()) })
            }
            (None, Some(url)) => {
                let keys = fetch_jwks(url)?;
                Some(Jwks { url: Some(url.to_string()), keys: RwLock::new(keys), fetched: Mutex::new(Instant::now()) })
            }
            _ => None,
        };
        Ok(Verifier {
            secret: secret.map(|s| DecodingKey::from_secret(s.as_bytes())),
            jwks,
            role_claim: role_claim.to_string(),
            audience: audience.map(str::to_string),
            issuer: issuer.map(str::to_string),
            login_role: None,
        })
    }

    /// The gateway's login role, learnt from the database at start: a token naming it is
    /// refused, since acting as it would mean acting with the grants of every role the gateway
    /// serves (db.rs refuses it again, with every role the login role is not a member of).
    pub fn set_login_role(&mut self, role: &str) {
        self.login_role = Some(role.to_string());
    }

    /// The caller a request's headers prove, or why not.
    pub fn verify(&self, headers: &HeaderMap) -> Result<Caller, Refusal> {
        let Some(value) = headers.get(header::AUTHORIZATION) else { return Err(Refusal::Missing) };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| Refusal::Invalid("the Authorization header must be \"Bearer <token>\"".into()))?;
        let claims = self.claims(token)?;
        let role = match claims.get(&self.role_claim) {
            Some(Value::String(r)) if !r.is_empty() && r.len() <= 63 => r.clone(),
            Some(_) => {
                return Err(Refusal::Invalid(format!(
                    "the token's \"{}\" claim must be a role name (1 to 63 bytes)",
                    self.role_claim
                )))
            }
            None => return Err(Refusal::Invalid(format!("the token has no \"{}\" claim", self.role_claim))),
        };
        // `none` switches a session back to its login role (set_config('role', 'none')), and the
        // login role holds every grant the gateway serves: neither is a role to act as.
        if role.eq_ignore_ascii_case("none") || self.login_role.as_deref() == Some(role.as_str()) {
            return Err(Refusal::Forbidden(not_a_role_to_act_as(&role)));
        }
        let key = match claims.get("sub") {
            Some(Value::String(s)) => format!("sub:{s}"),
            _ => format!("role:{role}"),
        };
        Ok(Caller { role: Some(role), key: Some(key) })
    }

    fn claims(&self, token: &str) -> Result<serde_json::Map<String, Value>, Refusal> {
        let head = jsonwebtoken::decode_header(token).map_err(|e| Refusal::Invalid(format!("malformed token: {e}")))?;
        let key = self.key_for(&head)?;
        let mut v = Validation::new(head.alg);
        v.leeway = 30;
        v.validate_nbf = true;
        v.set_required_spec_claims(&["exp"]);
        match &self.audience {
            Some(a) => v.set_audience(&[a]),
            None => v.validate_aud = false,
        }
        if let Some(i) = &self.issuer {
            v.set_issuer(&[i]);
        }
        jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &key, &v)
            .map(|d| d.claims)
            .map_err(|e| Refusal::Invalid(format!("token refused: {e}")))
    }

    /// The key for a token's header. An algorithm is accepted only with a key of its kind: an
    /// HMAC algorithm with the secret, any other with a JWKS key that declares it (or whose
    /// type allows it): a public key is never used as an HMAC secret.
    fn key_for(&self, head: &jsonwebtoken::Header) -> Result<DecodingKey, Refusal> {
        if matches!(head.alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
            return self
                .secret
                .clone()
                .ok_or_else(|| Refusal::Invalid(format!("{:?} tokens are not accepted here", head.alg)));
        }
        let Some(jwks) = &self.jwks else {
            return Err(Refusal::Invalid(format!("{:?} tokens are not accepted here (no JWKS configured)", head.alg)));
        };
        if let Some(k) = jwks.find(head) {
            return Ok(k);
        }
        if jwks.refresh(JWKS_UNKNOWN_KID_REFRESH) {
            if let Some(k) = jwks.find(head) {
                return Ok(k);
            }
        }
        Err(Refusal::Invalid(match &head.kid {
            Some(kid) => format!("no {:?} key with kid \"{}\"", head.alg, crate::wire::shorten(kid)),
            None => format!("no {:?} key (the token names no kid)", head.alg),
        }))
    }

    /// Fetch the JWKS URL again if its keys are older than the refresh period (called from a
    /// background task).
    pub fn refresh_keys(&self) {
        if let Some(j) = &self.jwks {
            j.refresh(JWKS_REFRESH);
        }
    }
}

impl Jwks {
    fn find(&self, head: &jsonwebtoken::Header) -> Option<DecodingKey> {
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        let fits = |(kid, alg, _): &&(Option<String>, Algorithm, DecodingKey)| {
            *alg == head.alg && (head.kid.is_none() || kid.as_deref() == head.kid.as_deref())
        };
        let mut matching = keys.iter().filter(fits);
        let first = matching.next()?;
        // Without a kid, only an unambiguous key.
        if head.kid.is_none() && matching.next().is_some() {
            return None;
        }
        Some(first.2.clone())
    }

    /// Fetch the URL again when the keys are older than `age`; whether new keys were read.
    fn refresh(&self, age: Duration) -> bool {
        let Some(url) = &self.url else { return false };
        {
            let mut at = self.fetched.lock().unwrap_or_else(|e| e.into_inner());
            if at.elapsed() < age {
                return false;
            }
            *at = Instant::now();
        }
        match fetch_jwks(url) {
            Ok(keys) => {
                *self.keys.write().unwrap_or_else(|e| e.into_inner()) = keys;
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "JWKS refresh failed: keeping the keys read before");
                false
            }
        }
    }
}

fn fetch_jwks(url: &str) -> Result<Vec<(Option<String>, Algorithm, DecodingKey)>, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(10))).build().into();
    let text = agent
        .get(url)
        .call()
        .and_then(|mut r| r.body_mut().with_config().limit(1 << 20).read_to_string())
        .map_err(|e| format!("--jwks-url {url}: {e}"))?;
    parse_jwks(&text).map_err(|e| format!("--jwks-url {url}: {e}"))
}

/// The usable keys of a JWK Set, each with the one algorithm it is accepted for (its `alg`, or
/// the usual one of its type: RS256, ES256 or ES384 by curve, EdDSA).
pub fn parse_jwks(text: &str) -> Result<Vec<(Option<String>, Algorithm, DecodingKey)>, String> {
    let set: JwkSet = serde_json::from_str(text).map_err(|e| format!("not a JWK Set: {e}"))?;
    let mut keys = Vec::new();
    for jwk in &set.keys {
        let alg = match (&jwk.common.key_algorithm, &jwk.algorithm) {
            // The JWK's `alg` (KeyAlgorithm) by its name, when it is a signature algorithm.
            (Some(a), _) => match format!("{a:?}").parse::<Algorithm>() {
                Ok(a) => a,
                Err(_) => continue,
            },
            (None, AlgorithmParameters::RSA(_)) => Algorithm::RS256,
            (None, AlgorithmParameters::EllipticCurve(ec)) => match format!("{:?}", ec.curve).as_str() {
                "P256" => Algorithm::ES256,
                "P384" => Algorithm::ES384,
                _ => continue,
            },
            (None, AlgorithmParameters::OctetKeyPair(_)) => Algorithm::EdDSA,
            _ => continue,
        };
        if matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
            continue; // symmetric keys come from --jwt-secret only
        }
        match DecodingKey::from_jwk(jwk) {
            Ok(k) => keys.push((jwk.common.key_id.clone(), alg, k)),
            Err(e) => tracing::warn!(kid = ?jwk.common.key_id, error = %e, "JWKS: a key that cannot be used, skipped"),
        }
    }
    if keys.is_empty() {
        return Err("the JWK Set has no usable public key (RSA, EC P-256/P-384, Ed25519)".into());
    }
    Ok(keys)
}

/// The request checks: who may call, from which sites, by which host names.
pub struct Policy {
    pub verifier: Option<Verifier>,
    pub cors_origins: Vec<String>,
    /// The `Host` names served (browser.rs).
    pub hosts: Hosts,
}

/// The middleware of every `/api/v1` route: refuse a cross-site request and a body that is not
/// JSON, then establish who the request acts as.
pub async fn guard(State(policy): State<Arc<Policy>>, mut req: Request, next: Next) -> Response {
    let headers = req.headers();
    let route = req.extensions().get::<MatchedPath>().map_or_else(|| req.uri().path(), |m| m.as_str());
    let changes_state = browser::changes_state(req.method(), route);
    let checked = browser::check_cross_site(headers, changes_state, &policy.cors_origins)
        .and_then(|()| check_content_type(req.method(), headers));
    if let Err(e) = checked {
        return browser::refused(headers, e.into_response());
    }
    let caller = match &policy.verifier {
        None => match anonymous_caller(headers) {
            Ok(c) => c,
            Err(e) => return browser::refused(headers, e.into_response()),
        },
        // With a token, the token's subject: a client id is not asked for (a caller could
        // otherwise pick a new one to get past its limit).
        Some(v) => match v.verify(headers) {
            Ok(c) => c,
            Err(refusal) => return browser::refused(headers, unauthorized(refusal)),
        },
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// Whether a request says it has a body (which a refusal before the handler leaves unread).
pub fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).is_some_and(|v| v.trim() != "0")
}

/// A request with a body must say it is JSON; a `Content-Type` that is not JSON is refused
/// whatever the body (a form or `text/plain` POST from a page).
pub fn check_content_type(method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    if !matches!(*method, Method::POST | Method::PUT | Method::PATCH | Method::DELETE) {
        return Ok(());
    }
    match headers.get(header::CONTENT_TYPE) {
        Some(ct) if is_json(ct) => Ok(()),
        None if !has_body(headers) => Ok(()),
        other => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "request bodies must be JSON (Content-Type: application/json), got {}",
                other
                    .and_then(|v| v.to_str().ok())
                    .map(|v| format!("\"{}\"", crate::wire::shorten(v)))
                    .unwrap_or("none".into())
            ),
        )),
    }
}

fn is_json(ct: &HeaderValue) -> bool {
    let Ok(ct) = ct.to_str() else { return false };
    let essence = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Why a token's role is refused, in the words of every such refusal (here and in db.rs).
pub fn not_a_role_to_act_as(role: &str) -> String {
    format!(
        "the token's role \"{}\" is not one this gateway may act as: it must be a role the gateway's login \
         role is a member of, other than the login role itself and superusers",
        crate::wire::shorten(role)
    )
}

fn unauthorized(refusal: Refusal) -> Response {
    let (message, challenge) = match refusal {
        Refusal::Missing => ("a bearer token is required (Authorization: Bearer <JWT>)".to_string(), "Bearer"),
        Refusal::Invalid(m) => (m, "Bearer error=\"invalid_token\""),
        // A role refused here is answered as db.rs answers the roles it refuses.
        Refusal::Forbidden(m) => return ApiError::new(StatusCode::FORBIDDEN, m).into_response(),
    };
    let mut r = ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
    r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    r
}

/// How many waiting pops each caller has open, bounded per caller (the pool bounds them all).
#[derive(Default)]
pub struct Waits {
    open: Mutex<HashMap<String, usize>>,
}

/// One caller's open waiting pop; leaving it (also by a client that went away) frees its place.
pub struct WaitPermit {
    waits: Arc<Waits>,
    key: String,
}

impl Waits {
    pub fn enter(self: &Arc<Self>, key: &str, limit: usize) -> Option<WaitPermit> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(key.to_string()).or_insert(0);
        if *n >= limit {
            return None;
        }
        *n += 1;
        Some(WaitPermit { waits: self.clone(), key: key.to_string() })
    }
}

impl Drop for WaitPermit {
    fn drop(&mut self) {
        let mut open = self.waits.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};
    use serde_json::json;

    const SECRET: &str = "a-test-secret-of-at-least-32-bytes!!";

    fn now() -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {token}")).unwrap());
        h
    }

    fn hs(claims: Value, alg: Algorithm, secret: &str) -> String {
        encode(&Header::new(alg), &claims, &EncodingKey::from_secret(secret.as_bytes())).unwrap()
    }

    fn secret_verifier() -> Verifier {
        Verifier::new(Some(SECRET), None, None, "role", None, None).unwrap()
    }

    // An Ed25519 key pair (RFC 8037's example key) and its JWK.
    const ED_PRIVATE_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIJ1hsZ3v/VpguoRK9JLsLMREScVpezJpGXA7rAMcrn9g\n-----END PRIVATE KEY-----\n";
    const ED_JWKS: &str =
        r#"{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"ed1","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#;

    fn ed_verifier() -> Verifier {
        let dir = std::env::temp_dir().join(format!("queen-gateway-jwks-{}", std::process::id()));
        std::fs::write(&dir, ED_JWKS).unwrap();
        let v = Verifier::new(None, Some(dir.to_str().unwrap()), None, "role", None, None).unwrap();
        std::fs::remove_file(&dir).unwrap();
        v
    }

    fn ed(claims: Value, kid: Option<&str>) -> String {
        let mut h = Header::new(Algorithm::EdDSA);
        h.kid = kid.map(str::to_string);
        encode(&h, &claims, &EncodingKey::from_ed_pem(ED_PRIVATE_PEM.as_bytes()).unwrap()).unwrap()
    }

    fn refused(r: Result<Caller, Refusal>) -> String {
        match r {
            Err(Refusal::Invalid(m)) => m,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn hmac_tokens() {
        let v = secret_verifier();
        let ok = hs(json!({"sub": "alice", "role": "app_orders", "exp": now() + 60}), Algorithm::HS256, SECRET);
        assert_eq!(
            v.verify(&bearer(&ok)),
            Ok(Caller { role: Some("app_orders".into()), key: Some("sub:alice".into()) })
        );
        let no_sub = hs(json!({"role": "app_orders", "exp": now() + 60}), Algorithm::HS512, SECRET);
        assert_eq!(v.verify(&bearer(&no_sub)).unwrap().key.as_deref(), Some("role:app_orders"));
        assert_eq!(v.verify(&HeaderMap::new()), Err(Refusal::Missing));

        let cases = [
            (
                hs(json!({"role": "r", "exp": now() + 60}), Algorithm::HS256, "another-secret-of-at-least-32-bytes!"),
                "InvalidSignature",
            ),
            (hs(json!({"role": "r", "exp": now() - 120}), Algorithm::HS256, SECRET), "ExpiredSignature"),
            (hs(json!({"role": "r"}), Algorithm::HS256, SECRET), "exp"),
            (
                hs(json!({"role": "r", "exp": now() + 60, "nbf": now() + 600}), Algorithm::HS256, SECRET),
                "ImmatureSignature",
            ),
            (hs(json!({"sub": "x", "exp": now() + 60}), Algorithm::HS256, SECRET), "no \"role\" claim"),
            (hs(json!({"role": 7, "exp": now() + 60}), Algorithm::HS256, SECRET), "must be a role name"),
            (hs(json!({"role": "", "exp": now() + 60}), Algorithm::HS256, SECRET), "must be a role name"),
            ("not.a.token".to_string(), "malformed"),
            // alg none: unsigned.
            ("eyJhbGciOiJub25lIn0.eyJyb2xlIjoiciIsImV4cCI6OTk5OTk5OTk5OX0.".to_string(), "malformed"),
            // A public-key algorithm with no JWKS configured.
            (ed(json!({"role": "r", "exp": now() + 60}), Some("ed1")), "not accepted here"),
        ];
        for (token, why) in cases {
            let m = refused(v.verify(&bearer(&token)));
            assert!(m.contains(why), "{token}: {m} should mention {why}");
        }
        let mut basic = HeaderMap::new();
        basic.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic dXNlcjpwYXNz"));
        assert!(refused(v.verify(&basic)).contains("Bearer"));
    }

    #[test]
    fn roles_a_token_may_not_name() {
        let mut v = secret_verifier();
        v.set_login_role("gateway");
        let claim = |role: &str| hs(json!({"sub": "s", "role": role, "exp": now() + 60}), Algorithm::HS256, SECRET);
        for role in ["none", "NONE", "None", "gateway"] {
            match v.verify(&bearer(&claim(role))) {
                Err(Refusal::Forbidden(m)) => assert!(m.contains("may act as"), "{m}"),
                other => panic!("{role}: {other:?}"),
            }
            let r = unauthorized(v.verify(&bearer(&claim(role))).unwrap_err());
            assert_eq!(r.status(), StatusCode::FORBIDDEN);
        }
        // Empty: not a role name at all.
        assert!(refused(v.verify(&bearer(&claim("")))).contains("must be a role name"));
        // Role names are case-sensitive: "Gateway" is another role (db.rs checks membership).
        assert_eq!(v.verify(&bearer(&claim("Gateway"))).unwrap().role.as_deref(), Some("Gateway"));
        assert_eq!(v.verify(&bearer(&claim("app_orders"))).unwrap().role.as_deref(), Some("app_orders"));
    }

    #[test]
    fn public_key_tokens() {
        let v = ed_verifier();
        let ok = ed(json!({"sub": "bob", "role": "app_billing", "exp": now() + 60}), Some("ed1"));
        assert_eq!(v.verify(&bearer(&ok)).unwrap().role.as_deref(), Some("app_billing"));
        // No kid: the one key of that algorithm.
        let no_kid = ed(json!({"role": "app_billing", "exp": now() + 60}), None);
        assert!(v.verify(&bearer(&no_kid)).is_ok());
        assert!(refused(v.verify(&bearer(&ed(json!({"role": "r", "exp": now() + 60}), Some("other"))))).contains("kid"));
        // HS256 signed with the public key's bytes (the algorithm confusion attack): no secret
        // is configured, so no HMAC token is accepted at all.
        let confused = hs(
            json!({"role": "r", "exp": now() + 60}),
            Algorithm::HS256,
            "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
        );
        assert!(refused(v.verify(&bearer(&confused))).contains("not accepted here"));
    }

    #[test]
    fn configuration_errors() {
        assert!(Verifier::new(None, None, None, "role", None, None).is_err());
        assert!(Verifier::new(Some("short"), None, None, "role", None, None).err().unwrap().contains("32 bytes"));
        assert!(parse_jwks(r#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#).is_err());
        assert!(parse_jwks("{}").is_err());
    }

    #[test]
    fn audience_and_issuer() {
        let v = Verifier::new(Some(SECRET), None, None, "pg_role", Some("queen"), Some("https://idp.example")).unwrap();
        let good =
            json!({"role": "x", "pg_role": "app", "aud": "queen", "iss": "https://idp.example", "exp": now() + 60});
        assert_eq!(v.verify(&bearer(&hs(good, Algorithm::HS256, SECRET))).unwrap().role.as_deref(), Some("app"));
        let other_aud = json!({"pg_role": "app", "aud": "other", "iss": "https://idp.example", "exp": now() + 60});
        assert!(refused(v.verify(&bearer(&hs(other_aud, Algorithm::HS256, SECRET)))).contains("InvalidAudience"));
        let other_iss = json!({"pg_role": "app", "aud": "queen", "iss": "https://evil.example", "exp": now() + 60});
        assert!(refused(v.verify(&bearer(&hs(other_iss, Algorithm::HS256, SECRET)))).contains("InvalidIssuer"));
    }

    #[test]
    fn content_types() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(header::HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
            }
            m
        };
        let ok = [
            (Method::POST, h(&[("content-type", "application/json"), ("content-length", "2")])),
            (Method::POST, h(&[("content-type", "application/json; charset=utf-8"), ("content-length", "2")])),
            (Method::POST, h(&[("content-type", "application/merge-patch+json"), ("content-length", "2")])),
            (Method::POST, h(&[("content-length", "0")])),
            (Method::POST, h(&[])),
            (Method::GET, h(&[("content-type", "text/plain")])),
        ];
        for (m, headers) in ok {
            assert!(check_content_type(&m, &headers).is_ok(), "{m} {headers:?}");
        }
        let refused = [
            (Method::POST, h(&[("content-type", "text/plain"), ("content-length", "2")])),
            (Method::POST, h(&[("content-type", "text/plain"), ("content-length", "0")])),
            (Method::POST, h(&[("content-type", "application/x-www-form-urlencoded")])),
            (Method::POST, h(&[("content-length", "5")])),
            (Method::POST, h(&[("transfer-encoding", "chunked")])),
            (Method::DELETE, h(&[("content-type", "multipart/form-data"), ("content-length", "9")])),
        ];
        for (m, headers) in refused {
            assert_eq!(check_content_type(&m, &headers).unwrap_err().status, 415, "{m} {headers:?}");
        }
    }

    #[test]
    fn without_auth_a_caller_is_its_client_id_or_no_one() {
        // Everyone reaches a gateway without authentication from a loopback address as the
        // login role: without a client id, a request is no one's in particular.
        assert_eq!(anonymous_caller(&HeaderMap::new()).unwrap(), Caller { role: None, key: None });
        let mut h = HeaderMap::new();
        h.insert(CLIENT_ID, HeaderValue::from_static("billing-worker-7"));
        assert_eq!(anonymous_caller(&h).unwrap().key.as_deref(), Some("client:billing-worker-7"));
        assert_eq!(anonymous_caller(&h).unwrap().role, None);
        for bad in ["", "two words", &"x".repeat(129)] {
            h.insert(CLIENT_ID, HeaderValue::from_str(bad).unwrap());
            assert_eq!(anonymous_caller(&h).unwrap_err().status, 400, "{bad:?}");
        }
        h.insert(CLIENT_ID, HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
        assert_eq!(anonymous_caller(&h).unwrap_err().status, 400);
    }

    #[test]
    fn waits_are_bounded_per_caller() {
        let w = Arc::new(Waits::default());
        let a1 = w.enter("a", 2).unwrap();
        let _a2 = w.enter("a", 2).unwrap();
        assert!(w.enter("a", 2).is_none());
        assert!(w.enter("b", 2).is_some());
        drop(a1);
        assert!(w.enter("a", 2).is_some());
    }
}
