//! A local HTTP/1.1 server that answers each connection with the next recorded exchange
//! (status, headers, body), so the clients meet real wire bytes: including a connection cut
//! part way through the body and a server that does not answer in time. It keeps what each
//! request sent, for the tests to check.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One answer of the server.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Send only this many bytes of the body (the `Content-Length` announces all of them),
    /// then close the connection.
    pub cut_after: Option<usize>,
    /// Wait this long before answering.
    pub delay: Option<Duration>,
}

impl Answer {
    /// A JSON answer with this status and body.
    pub fn json(status: u16, body: &str) -> Self {
        Answer {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.as_bytes().to_vec(),
            cut_after: None,
            delay: None,
        }
    }

    /// The same answer with one more header.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// What a request sent.
#[derive(Debug, Clone)]
pub struct Request {
    /// The request line, e.g. `POST /v1/chat/completions HTTP/1.1`.
    pub line: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The server: answers connection `i` with `answers[i]` (the last one again once they are
/// used up).
pub struct Server {
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    pub async fn start(answers: Vec<Answer>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        let task = tokio::spawn(async move {
            let mut i = 0;
            while let Ok((conn, _)) = listener.accept().await {
                let answer = answers[i.min(answers.len() - 1)].clone();
                i += 1;
                let seen = seen.clone();
                tokio::spawn(async move { serve(conn, answer, seen).await });
            }
        });
        Server {
            addr,
            requests,
            task,
        }
    }

    /// The base URL of an API under `/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut conn: TcpStream, answer: Answer, seen: Arc<Mutex<Vec<Request>>>) {
    let Some(request) = read_request(&mut conn).await else {
        return;
    };
    seen.lock().unwrap().push(request);
    if let Some(d) = answer.delay {
        tokio::time::sleep(d).await;
    }
    let reason = match answer.status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        529 => "Overloaded",
        _ => "Status",
    };
    let mut head = format!("HTTP/1.1 {} {reason}\r\n", answer.status);
    for (k, v) in &answer.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        answer.body.len()
    ));
    let body = match answer.cut_after {
        Some(n) => &answer.body[..n.min(answer.body.len())],
        None => &answer.body[..],
    };
    let _ = conn.write_all(head.as_bytes()).await;
    let _ = conn.write_all(body).await;
    let _ = conn.flush().await;
    // Dropping the connection closes it: after a cut, before the announced length.
}

async fn read_request(conn: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let line = lines.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Some(Request {
        line,
        headers,
        body,
    })
}
