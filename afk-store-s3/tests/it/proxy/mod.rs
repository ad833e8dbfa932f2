//! A fault-injecting HTTP/1.1 proxy on loopback, between the store's S3 client and the test
//! server, whose behaviour each test controls per request.
//!
//! One request per connection: the proxy reads one request from the client, forwards it with
//! `Connection: close`, reads the whole answer, and adds `Connection: close` to it, so the
//! client opens a fresh connection for every request and a fault never leaks into the next
//! request. Faults apply to PUTs of run head objects (`…/head`) only, and
//! [`Proxy::drop_marker_puts`] to PUTs of attention markers; everything else passes through. Every socket operation is bounded by [`IO_BOUND`]; dropping the [`Proxy`] aborts
//! its accept loop and every connection task.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// Longest any single read, write or connect of the proxy may take.
const IO_BOUND: Duration = Duration::from_secs(30);

/// What the proxy does with a faulted head PUT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward the request, wait for the server's full answer (the write landed), then close
    /// the client connection without answering (FIN): the client sees an incomplete message.
    DropAfterForward,
    /// Like [`Fault::DropAfterForward`] but reset the connection (RST): the client sees an I/O
    /// error (connection reset), as behind a load balancer that drops a backend connection.
    ResetAfterForward,
    /// Close the client connection without forwarding: the write never reaches the server.
    DropBeforeForward,
    /// Forward the request (the write lands at once), but hold the answer back this long.
    Delay(Duration),
}

#[derive(Debug, Default)]
struct State {
    /// Head PUTs seen so far.
    head_puts: usize,
    /// The fault for the next head PUTs and how many of them it still applies to.
    armed: Option<(Fault, usize)>,
    /// Remove `If-None-Match` and `If-Match` from every request.
    strip_conditions: bool,
    /// Requests that had a conditional header removed.
    stripped: usize,
    /// Answer head PUTs with an ETag other than the server's (one its `If-Match` refuses).
    mangle_head_etags: bool,
    /// Head PUT answers whose ETag was changed.
    mangled: usize,
    /// Faults applied, in order.
    applied: Vec<Fault>,
    /// Close the connection of every PUT of an attention marker without forwarding it.
    drop_marker_puts: bool,
}

/// The proxy: listens on `127.0.0.1:<free port>` until dropped.
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    /// Start a proxy in front of `upstream` (`http://127.0.0.1:PORT`).
    pub async fn start(upstream: &str) -> Proxy {
        let authority = upstream
            .strip_prefix("http://")
            .expect("the test server endpoint is plain http")
            .trim_end_matches('/');
        let upstream: SocketAddr = tokio::net::lookup_host(authority)
            .await
            .expect("resolve the test server")
            .next()
            .expect("the test server has an address");
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            // Owned by the accept loop: aborting it aborts every connection task too.
            let mut conns = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((client, _)) = accepted else { continue };
                        conns.spawn(serve(client, upstream, shared.clone()));
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        });
        Proxy { addr, state, task }
    }

    /// The endpoint URL to give the store.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Apply `fault` to the next `count` head PUTs (replacing any fault still armed).
    pub fn arm(&self, fault: Fault, count: usize) {
        self.lock().armed = Some((fault, count));
    }

    /// Let every request through again.
    pub fn disarm(&self) {
        self.lock().armed = None;
    }

    /// Drop (or stop dropping) every PUT of an attention marker (`…/.afk-attention/…`) before
    /// it reaches the server, as [`Fault::DropBeforeForward`] does for head PUTs.
    pub fn drop_marker_puts(&self, on: bool) {
        self.lock().drop_marker_puts = on;
    }

    /// Remove (or stop removing) `If-None-Match` / `If-Match` from requests: the server then
    /// behaves like one that ignores conditional writes.
    pub fn strip_conditions(&self, on: bool) {
        self.lock().strip_conditions = on;
    }

    /// Change (or stop changing) the ETag of every head PUT's answer into one the server's
    /// `If-Match` refuses: a service whose PUT answers an ETag that its conditions do not take.
    pub fn mangle_head_etags(&self, on: bool) {
        self.lock().mangle_head_etags = on;
    }

    /// Head PUT answers whose ETag was changed so far.
    pub fn mangled(&self) -> usize {
        self.lock().mangled
    }

    /// Head PUTs seen so far (faulted or not).
    pub fn head_puts(&self) -> usize {
        self.lock().head_puts
    }

    /// Faults applied so far, in order.
    pub fn applied(&self) -> Vec<Fault> {
        self.lock().applied.clone()
    }

    /// Requests that had a conditional header removed.
    pub fn stripped(&self) -> usize {
        self.lock().stripped
    }
}

async fn bounded<T>(
    fut: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    tokio::time::timeout(IO_BOUND, fut)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

/// One request of one client connection; errors just end the connection.
async fn serve(client: TcpStream, upstream: SocketAddr, state: Arc<Mutex<State>>) {
    let _ = serve_one(client, upstream, state).await;
}

async fn serve_one(
    client: TcpStream,
    upstream: SocketAddr,
    state: Arc<Mutex<State>>,
) -> std::io::Result<()> {
    let mut client = BufReader::new(client);
    let mut request_line = String::new();
    if bounded(client.read_line(&mut request_line)).await? == 0 {
        return Ok(());
    }
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers: Vec<(String, String)> = Vec::new();
    loop {
        let mut line = String::new();
        if bounded(client.read_line(&mut line)).await? == 0 {
            return Ok(());
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.to_ascii_lowercase())
    };
    if header("expect").as_deref() == Some("100-continue") {
        bounded(client.get_mut().write_all(b"HTTP/1.1 100 Continue\r\n\r\n")).await?;
    }
    let body = read_body(
        &mut client,
        header("content-length"),
        header("transfer-encoding"),
    )
    .await?;

    let is_head_put =
        method == "PUT" && path.split('?').next().is_some_and(|p| p.ends_with("/head"));
    let is_marker_put = method == "PUT" && path.contains("/.afk-attention/");
    let (fault, strip, mangle) = {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        if is_marker_put && s.drop_marker_puts {
            return Ok(());
        }
        let mangle = is_head_put && s.mangle_head_etags;
        let mut fault = None;
        if is_head_put {
            s.head_puts += 1;
            if let Some((f, left)) = s.armed {
                fault = Some(f);
                s.applied.push(f);
                s.armed = (left > 1).then_some((f, left - 1));
            }
        }
        let strip = s.strip_conditions && headers.iter().any(|(n, _)| is_conditional(n));
        if strip {
            s.stripped += 1;
        }
        (fault, s.strip_conditions, mangle)
    };
    if fault == Some(Fault::DropBeforeForward) {
        return Ok(());
    }

    let mut forward = request_line.into_bytes();
    for (name, value) in &headers {
        let skip = name.eq_ignore_ascii_case("connection")
            || name.eq_ignore_ascii_case("expect")
            || (strip && is_conditional(name));
        if !skip {
            forward.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
    }
    forward.extend_from_slice(b"Connection: close\r\n\r\n");
    forward.extend_from_slice(&body);
    let mut server = bounded(TcpStream::connect(upstream)).await?;
    bounded(server.write_all(&forward)).await?;
    let mut answer = Vec::new();
    bounded(server.read_to_end(&mut answer)).await?;

    let client = client.into_inner();
    match fault {
        Some(Fault::DropAfterForward) => return Ok(()),
        Some(Fault::ResetAfterForward) => {
            // A zero linger resets at once on drop; the deprecation is about blocking drops
            // with a non-zero linger.
            #[allow(deprecated)]
            client.set_linger(Some(Duration::ZERO))?;
            return Ok(());
        }
        Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
        Some(Fault::DropBeforeForward) | None => {}
    }
    let mut answer = close_answer(answer);
    if mangle && let Some(changed) = mangle_etag(&answer) {
        answer = changed;
        state.lock().unwrap_or_else(|p| p.into_inner()).mangled += 1;
    }
    let mut client = client;
    bounded(client.write_all(&answer)).await?;
    bounded(client.shutdown()).await
}

fn is_conditional(name: &str) -> bool {
    name.eq_ignore_ascii_case("if-none-match") || name.eq_ignore_ascii_case("if-match")
}

/// The request body as sent (a `Content-Length` body, or the raw chunked encoding).
async fn read_body(
    client: &mut BufReader<TcpStream>,
    length: Option<String>,
    encoding: Option<String>,
) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    if encoding.is_some_and(|e| e.contains("chunked")) {
        loop {
            let mut line = String::new();
            bounded(client.read_line(&mut line)).await?;
            body.extend_from_slice(line.as_bytes());
            let size = line.trim().split(';').next().unwrap_or_default();
            let size = usize::from_str_radix(size, 16)
                .map_err(|_| std::io::Error::other("bad chunk size"))?;
            if size == 0 {
                // Trailers up to the empty line.
                loop {
                    let mut t = String::new();
                    bounded(client.read_line(&mut t)).await?;
                    body.extend_from_slice(t.as_bytes());
                    if t.trim().is_empty() {
                        return Ok(body);
                    }
                }
            }
            let mut chunk = vec![0; size + 2];
            bounded(client.read_exact(&mut chunk)).await?;
            body.extend_from_slice(&chunk);
        }
    }
    let length: usize = length.and_then(|l| l.parse().ok()).unwrap_or(0);
    body.resize(length, 0);
    bounded(client.read_exact(&mut body)).await?;
    Ok(body)
}

/// The answer with its `ETag` header changed (`"<etag>"` becomes `"<etag>-x"`), or `None` when
/// it has none.
fn mangle_etag(answer: &[u8]) -> Option<Vec<u8>> {
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&answer[..end]);
    let mut found = false;
    let lines: Vec<String> = head
        .split("\r\n")
        .map(|line| match line.split_once(':') {
            Some((name, value)) if name.eq_ignore_ascii_case("etag") => {
                found = true;
                let bare = value.trim().trim_matches('"');
                format!("{name}: \"{bare}-x\"")
            }
            _ => line.to_owned(),
        })
        .collect();
    found.then(|| {
        let mut out = lines.join("\r\n").into_bytes();
        out.extend_from_slice(&answer[end..]);
        out
    })
}

/// The server's answer with `Connection: close` (so the client does not reuse the connection).
fn close_answer(answer: Vec<u8>) -> Vec<u8> {
    let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return answer;
    };
    let head = String::from_utf8_lossy(&answer[..end]);
    let mut out = Vec::with_capacity(answer.len() + 19);
    for line in head.split("\r\n") {
        if !line.to_ascii_lowercase().starts_with("connection:") {
            out.extend_from_slice(line.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    out.extend_from_slice(b"Connection: close");
    out.extend_from_slice(&answer[end..]);
    out
}
