//! One connection type for both topologies: a `ConnectionManager` (single node, reconnects on
//! its own) or a `ClusterConnection` (slot routing, MOVED/ASK, reconnects per node). Every
//! call is bounded by an overall deadline so that no operation hangs while a server is away.
//!
//! On a single node the deadline measures the server's silence, not the time a call waits
//! behind others: a call fails once it has waited the deadline *and* the server has answered
//! nothing (no call of this client) for the deadline. Thousands of runs sharing one
//! connection queue their calls behind each other, at most `WINDOW` of them handed to the
//! connection at once (so the client's own backlog of requests to write does not pass for a
//! silent server); while the server keeps answering, a queued call waits its turn (overload
//! slows runs down, it does not fail them), and a server that stopped answering fails every
//! waiting call within the deadline of its last answer. On
//! Cluster, where one node may be gone while the others answer, each call has the deadline of
//! its own.
//!
//! A server that is back must serve the next request. The `ConnectionManager` keeps the
//! outcome of its last reconnect attempt: if that attempt ran while the server was still down,
//! the first request after the server is back gets its stale `Connection refused` (and only
//! then starts a fresh connection). So a request that is safe to send twice (a read, a delete,
//! a listing: [`Repeat::Safe`]) and fails because its connection is dead is sent once more, on
//! the fresh connection, within the same deadline (and once more after a short pause if the
//! server answers `LOADING`: it is up but still replaying its append-only file). Commits are never re-sent here: an
//! ambiguous commit is resolved by reading it back (`store.rs`), and a claim must not take
//! two epochs.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use afk_core::{Error, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, FromRedisValue, IntoConnectionInfo, Pipeline,
    RedisConnectionInfo, RedisError, RedisResult, Value,
};

use crate::config::RedisConfig;
use crate::error::{is_noscript, is_tls_config_error, map_err};
use crate::scripts::Lua;
use crate::tls;

/// Whether a request may be sent a second time after its connection died.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repeat {
    /// Sending it twice has the effect of sending it once (reads, deletes, listings).
    Safe,
    /// It must not be repeated blindly (claims, commits).
    Never,
}

/// Whether a request that may be repeated and failed with `err` is sent once more, and after
/// what pause: at once when the connection itself is gone (refused, reset, closed: the next
/// attempt runs on a fresh connection), after a short pause when the server that just came
/// back is still loading its data (`LOADING`).
fn again_after(err: &RedisError) -> Option<Duration> {
    if err.is_io_error() || err.is_connection_dropped() || err.is_connection_refusal() {
        Some(Duration::ZERO)
    } else if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading) {
        Some(Duration::from_millis(100))
    } else {
        None
    }
}

/// The primaries' addresses in a `CLUSTER NODES` answer (`<id> <host>:<port>@<cport> <flags>
/// …`; failed nodes left out).
fn primaries(nodes: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for line in nodes.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(addr), Some(flags)) = (f.get(1), f.get(2)) else {
            continue;
        };
        if !flags.split(',').any(|x| x == "master") || flags.contains("fail") {
            continue;
        }
        let hostport = addr.split('@').next().unwrap_or(addr);
        if let Some((host, port)) = hostport.rsplit_once(':')
            && let Ok(port) = port.parse()
        {
            out.push((host.to_owned(), port));
        }
    }
    out
}

/// One script invocation: its KEYS and its ARGV (borrowed where the caller holds the bytes,
/// as a commit's values: they are copied once, into the command).
pub(crate) type ScriptCall<'a> = (Vec<Vec<u8>>, Vec<Cow<'a, [u8]>>);

/// A script call with owned KEYS and ARGV, as [`Client::eval_then`] takes two.
pub(crate) type OwnedCall<'a> = (&'a Lua, &'a [Vec<u8>], &'a [Vec<u8>]);

/// The ARGV of a script called without arguments.
pub(crate) const NO_ARGS: &[&[u8]] = &[];

#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// A connection plus the deadline every call gets.
#[derive(Clone)]
pub(crate) struct Client {
    conn: Conn,
    deadline: Duration,
    /// When the server last answered (single node; see the module docs).
    pulse: Option<std::sync::Arc<Pulse>>,
    /// Calls handed to the connection at once (single node): the rest wait here, so what the
    /// connection has in hand is answered in about one deadline's worth of server time.
    window: Option<std::sync::Arc<tokio::sync::Semaphore>>,
}

/// Most calls a single-node client hands to its connection at once (a call may be a pipeline
/// of a batch's commits). A call holds its place until its task runs again after the answer,
/// and with thousands of runs in flight that task waits in the runtime's queue, so a place
/// spends much of its time idle: the window must be wide enough that the server still has work
/// meanwhile (with 32 places, 10,000 runs in flight got a third fewer steps done than with
/// 1,024), and narrow enough that a call handed over is answered soon after the server reads
/// it (1,024 commit scripts take the server about a tenth of a second).
const WINDOW: usize = 1024;

/// When a single node last answered a call of the client, shared by its clones.
#[derive(Debug)]
struct Pulse {
    since: tokio::time::Instant,
    /// Microseconds from `since` to the latest answer.
    last_us: std::sync::atomic::AtomicU64,
}

impl Pulse {
    fn new() -> Self {
        Pulse {
            since: tokio::time::Instant::now(),
            last_us: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The server answered now.
    fn beat(&self) {
        let us = u64::try_from(self.since.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.last_us
            .fetch_max(us, std::sync::atomic::Ordering::Relaxed);
    }

    /// When the server last answered (`since` if never).
    fn last(&self) -> tokio::time::Instant {
        let us = self.last_us.load(std::sync::atomic::Ordering::Relaxed);
        self.since + Duration::from_micros(us)
    }
}

/// Whether `r` came from the server (an answer, or an error the server sent), rather than from
/// a connection that failed.
fn answered<T>(r: &RedisResult<T>) -> bool {
    match r {
        Ok(_) => true,
        Err(e) => {
            !(e.is_io_error()
                || e.is_timeout()
                || e.is_connection_dropped()
                || e.is_connection_refusal())
        }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let topo = match self.conn {
            Conn::Single(_) => "single",
            Conn::Cluster(_) => "cluster",
        };
        f.debug_struct("Client")
            .field("topology", &topo)
            .field("deadline", &self.deadline)
            .finish()
    }
}

/// A connection to the Cluster `cfg` names, with the client's own retries.
async fn open_cluster(
    cfg: &RedisConfig,
    certs: Option<redis::TlsCertificates>,
    deadline: Duration,
) -> RedisResult<Conn> {
    let mut infos = Vec::new();
    for (h, p) in &cfg.nodes {
        infos.push(node_info(cfg, h, *p)?);
    }
    let mut b = ClusterClientBuilder::new(infos)
        .connection_timeout(cfg.connect_timeout())
        .response_timeout(cfg.response_timeout())
        .overall_response_timeout(Some(deadline))
        .retries(3)
        .min_retry_wait(20)
        .max_retry_wait(500);
    if let Some(u) = &cfg.username {
        b = b.username(u);
    }
    if let Some(p) = &cfg.password {
        b = b.password(p.expose());
    }
    if let Some(certs) = certs.clone() {
        b = b.certs(certs);
    }
    let client = b.build()?;
    match client.get_async_connection().await {
        Ok(c) => Ok(Conn::Cluster(c)),
        Err(e) if cfg.tls => Err(diagnose_tls(cfg, certs, e).await),
        Err(e) => Err(e),
    }
}

/// A reconnecting connection to the single node `cfg` names.
async fn open_single(
    cfg: &RedisConfig,
    certs: Option<redis::TlsCertificates>,
) -> RedisResult<Conn> {
    let (h, p) = &cfg.nodes[0];
    let info = node_info(cfg, h, *p)?;
    let client = match certs {
        Some(certs) => redis::Client::build_with_tls(info, certs)?,
        None => redis::Client::open(info)?,
    };
    let mc = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(cfg.connect_timeout()))
        // No timeout per request inside the client: it would count the time a request waits
        // behind others on the connection. `Client::bounded` bounds it instead.
        .set_response_timeout(None)
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(200));
    Ok(Conn::Single(
        ConnectionManager::new_with_config(client, mc).await?,
    ))
}

fn node_info(cfg: &RedisConfig, host: &str, port: u16) -> RedisResult<ConnectionInfo> {
    let addr = if cfg.tls {
        ConnectionAddr::TcpTls {
            host: host.to_string(),
            port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(host.to_string(), port)
    };
    let mut redis = RedisConnectionInfo::default().set_db(cfg.db);
    if let Some(u) = &cfg.username {
        redis = redis.set_username(u);
    }
    if let Some(p) = &cfg.password {
        redis = redis.set_password(p.expose());
    }
    Ok(addr.into_connection_info()?.set_redis_settings(redis))
}

/// Map an error of connecting (or of the first `PING`): a reply that does not parse as the
/// Redis protocol means the URL names something that is not a Redis server (an HTTP server, a
/// TLS-only port reached without `rediss://`, another service): `InvalidConfig`, which retrying
/// cannot fix, instead of the `Unexpected` a garbled reply gets later on.
fn connect_err(e: RedisError, what: &str) -> Error {
    if not_a_cluster(&e) {
        return Error::invalid_config(format!(
            "redis: {what} failed: the server is not a Redis Cluster node; use a redis:// URL \
             (rediss:// with TLS) for a single server"
        ))
        .with_source(e);
    }
    let garbled = matches!(
        e.kind(),
        redis::ErrorKind::Parse | redis::ErrorKind::UnexpectedReturnType
    );
    if garbled && !is_tls_config_error(&e) {
        return Error::invalid_config(format!(
            "redis: {what} failed: the server did not answer in the Redis protocol; check the \
             host and port of the URL (a TLS-only server needs rediss://)"
        ))
        .with_source(e);
    }
    map_err(e, what)
}

/// What a server's first answer to a plain-text `PING` looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Speaks {
    /// A Redis reply (`+PONG`, `-NOAUTH …`): the port takes plain text.
    PlainRedis,
    /// A TLS record (an alert, `0x15 0x03 …`): the port takes TLS only.
    Tls,
    /// The connection was taken, then closed or reset without an answer: what a TLS-only
    /// Redis port does (it sends no alert), but also a proxy without a backend.
    ClosedSilently,
    /// No connection, no answer in time, or something else.
    Unknown,
}

/// Send `PING\r\n` over plain TCP to `host:port` and look at the first bytes of the answer,
/// within `within`. Tells a TLS URL pointed at a plain port (the server waits for the end of a
/// line that the TLS hello never sends, so the handshake only times out) and a plain URL
/// pointed at a TLS port (the server drops the connection) from a server that is down.
async fn speaks(host: &str, port: u16, within: Duration) -> Speaks {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let probe = async {
        let mut s = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        s.write_all(b"PING\r\n").await.ok()?;
        let mut buf = [0u8; 2];
        let mut n = 0;
        while n < buf.len() {
            match s.read(&mut buf[n..]).await {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(_) if n == 0 => return Some(Speaks::ClosedSilently),
                Err(_) => break,
            }
        }
        Some(match &buf[..n] {
            [b'+' | b'-', ..] => Speaks::PlainRedis,
            [0x15, 0x03] => Speaks::Tls,
            [] => Speaks::ClosedSilently,
            _ => Speaks::Unknown,
        })
    };
    tokio::time::timeout(within, probe)
        .await
        .ok()
        .flatten()
        .unwrap_or(Speaks::Unknown)
}

/// A failed connection's error, or, when the first node's port speaks the other protocol than
/// the URL (`rediss://` at a plain port, `redis://` at a TLS-only one), `InvalidConfig` saying
/// so. Only a retryable failure is looked into: anything else already says what is wrong.
async fn wrong_protocol_or(cfg: &RedisConfig, what: &str, err: Error) -> Error {
    let Some((host, port)) = cfg.nodes.first() else {
        return err;
    };
    if !err.is_retryable() {
        return err;
    }
    let within = cfg.connect_timeout().min(Duration::from_secs(1));
    match (cfg.tls, speaks(host, *port, within).await) {
        (true, Speaks::PlainRedis) => Error::invalid_config(format!(
            "redis: {what} failed: {host}:{port} answers plain Redis, without TLS; use a \
             redis:// URL for it, or the server's TLS port"
        ))
        .with_source(err),
        (false, Speaks::Tls) => Error::invalid_config(format!(
            "redis: {what} failed: {host}:{port} takes TLS connections only; use a rediss:// \
             URL (with tls_ca=<file> for a private CA)"
        ))
        .with_source(err),
        // Maybe passing (a proxy whose backend is away): still retryable, with the likely cause.
        (false, Speaks::ClosedSilently) => Error::new(
            err.kind(),
            format!(
                "{} ({host}:{port} took the connection and closed it without answering a PING, \
                 as a TLS-only Redis port does: if it takes TLS, use a rediss:// URL)",
                err.message()
            ),
        )
        .with_source(err),
        _ => err,
    }
}

/// Whether `reply` is a Cluster node's `CLUSTER INFO` (it names the cluster's state).
fn is_cluster_info(reply: &Value) -> bool {
    match reply {
        Value::BulkString(b) => b.windows(14).any(|w| w == b"cluster_state:"),
        Value::VerbatimString { text, .. } | Value::SimpleString(text) => {
            text.contains("cluster_state:")
        }
        _ => false,
    }
}

/// The server's answer to a Cluster command when it runs without Cluster support.
fn not_a_cluster(e: &RedisError) -> bool {
    e.to_string().contains("cluster support disabled")
}

impl Client {
    /// Connect (eagerly, so a wrong password or an absent server shows up here).
    pub(crate) async fn connect(cfg: &RedisConfig) -> Result<Self> {
        let what = format!("connect to {}", cfg.redacted_url());
        let started = Instant::now();
        match Self::connect_as_told(cfg, &what).await {
            Ok(c) => Ok(c),
            // A TLS hello at a plain port waits for an answer that never comes; plain text at a
            // TLS-only port is dropped at once. Only those two failures are looked into, so a
            // server that is merely silent or slow does not wait for the probe too.
            Err(e) if cfg.tls == (started.elapsed() >= cfg.connect_timeout()) => {
                Err(wrong_protocol_or(cfg, &what, e).await)
            }
            Err(e) => Err(e),
        }
    }

    /// [`Client::connect`] before a failure is looked into.
    async fn connect_as_told(cfg: &RedisConfig, what: &str) -> Result<Self> {
        let deadline = cfg.connect_timeout() + cfg.response_timeout();
        if cfg.tls {
            tls::ensure_crypto_provider();
        }
        // Read and check the TLS files first: a bad file is InvalidConfig naming the option.
        let certs = tls::certificates(cfg)?;
        let fut = async {
            if cfg.cluster {
                open_cluster(cfg, certs, deadline).await
            } else {
                open_single(cfg, certs).await
            }
        };
        let conn = match tokio::time::timeout(deadline, fut).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(connect_err(e, what)),
            Err(_) => return Err(timeout_err(what, deadline)),
        };
        let pulse = (!cfg.cluster).then(|| std::sync::Arc::new(Pulse::new()));
        let window =
            (!cfg.cluster).then(|| std::sync::Arc::new(tokio::sync::Semaphore::new(WINDOW)));
        let client = Client {
            conn,
            deadline,
            pulse,
            window,
        };
        if !cfg.cluster && client.answers_as_single_node(what).await? {
            return Ok(client);
        }
        let _: Value = client
            .query_mapped(&redis::cmd("PING"), what, connect_err)
            .await?;
        Ok(client)
    }

    /// One round trip proves the credentials and that the server is not a Cluster node:
    /// through a single-node URL such a node would list only its own keys (a console would
    /// show part of the store as all of it) and answer MOVED to writes. `Ok(true)`: the
    /// server answered as a single node; `Ok(false)`: it did not say (denied to this user,
    /// unknown to this server, or an authentication error), so PING must prove what it can.
    async fn answers_as_single_node(&self, what: &str) -> Result<bool> {
        let info = redis::cmd("CLUSTER").arg("INFO").clone();
        match self.bounded(self.raw::<Value>(&info)).await {
            None => Err(timeout_err(what, self.deadline)),
            // A Cluster node describes its cluster (`cluster_state:ok`, …); anything else (a
            // proxy's own answer) is not taken for one.
            Some(Ok(reply)) if is_cluster_info(&reply) => Err(Error::invalid_config(format!(
                "redis: {what} failed: the server is a Redis Cluster node; use a \
                 redis+cluster:// URL (rediss+cluster:// with TLS)"
            ))),
            Some(Ok(_)) => Ok(false),
            Some(Err(e)) if not_a_cluster(&e) => Ok(true),
            Some(Err(_)) => Ok(false),
        }
    }

    /// Every key matching `pattern` (`SCAN MATCH`, on every primary of a Cluster), as UTF-8
    /// strings (others are skipped). Reads only; each page is bounded by the deadline.
    pub(crate) async fn scan_primaries(&self, pattern: &str) -> Result<Vec<String>> {
        let nodes: Vec<Option<(String, u16)>> = match &self.conn {
            Conn::Single(_) => vec![None],
            Conn::Cluster(_) => {
                let text: String = self
                    .query(
                        &redis::cmd("CLUSTER").arg("NODES").clone(),
                        "list cluster nodes",
                    )
                    .await?;
                primaries(&text).into_iter().map(Some).collect()
            }
        };
        let mut out = Vec::new();
        for node in nodes {
            let mut cursor = 0u64;
            loop {
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(1000);
                let page: (u64, Vec<Vec<u8>>) = match (&self.conn, &node) {
                    (Conn::Cluster(c), Some((host, port))) => {
                        use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
                        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                            host: host.clone(),
                            port: *port,
                        });
                        let mut conn = c.clone();
                        let v = tokio::time::timeout(self.deadline, conn.route_command(cmd, route))
                            .await
                            .map_err(|_| timeout_err("scan a cluster node", self.deadline))?
                            .map_err(|e| map_err(e, "scan a cluster node"))?;
                        redis::from_redis_value(v)
                            .map_err(|e| map_err(e.into(), "scan a cluster node"))?
                    }
                    _ => self.query(&cmd, "scan").await?,
                };
                out.extend(page.1.into_iter().filter_map(|k| String::from_utf8(k).ok()));
                cursor = page.0;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(out)
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    async fn raw<T: FromRedisValue>(&self, cmd: &Cmd) -> RedisResult<T> {
        match &self.conn {
            Conn::Single(c) => cmd.query_async(&mut c.clone()).await,
            Conn::Cluster(c) => cmd.query_async(&mut c.clone()).await,
        }
    }

    async fn raw_pipe(&self, pipe: &Pipeline) -> RedisResult<Vec<RedisResult<Value>>> {
        match &self.conn {
            Conn::Single(c) => pipe.query_async(&mut c.clone()).await,
            Conn::Cluster(c) => pipe.query_async(&mut c.clone()).await,
        }
    }

    /// `call`'s result, or `None` once it has waited the deadline: on a single node, only if
    /// the server also answered nothing for the deadline (see the module docs); on Cluster,
    /// the deadline from the start.
    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = RedisResult<T>>,
    ) -> Option<RedisResult<T>> {
        let sent = tokio::time::Instant::now();
        let window = self.window.clone();
        // Unconstrained: a call whose answer is there is always ready when polled, so the
        // timer never fires instead because the task used up its scheduling budget.
        let mut call = std::pin::pin!(tokio::task::unconstrained(async move {
            // Closed never: a failed acquire only skips the window.
            let _turn = match &window {
                Some(w) => w.acquire().await.ok(),
                None => None,
            };
            call.await
        }));
        loop {
            let from = self.pulse.as_ref().map_or(sent, |p| p.last().max(sent));
            match tokio::time::timeout_at(from + self.deadline, call.as_mut()).await {
                Ok(r) => {
                    if let Some(p) = self.pulse.as_ref().filter(|_| answered(&r)) {
                        p.beat();
                    }
                    return Some(r);
                }
                // The server answered others meanwhile: this call is queued, not lost.
                Err(_) if self.pulse.as_ref().is_some_and(|p| p.last() > from) => {}
                Err(_) => return None,
            }
        }
    }

    /// Run one command under the deadline. Only used for reads, so a command that failed on
    /// a dead connection is sent once more on a fresh one (see the module docs).
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd, what: &str) -> Result<T> {
        self.query_mapped(cmd, what, map_err).await
    }

    /// [`Client::query`] with errors mapped by `map` (`map_err` but while connecting).
    async fn query_mapped<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        what: &str,
        map: fn(RedisError, &str) -> Error,
    ) -> Result<T> {
        let fut = async {
            match self.raw(cmd).await {
                Err(e) => match again_after(&e) {
                    Some(pause) => {
                        tracing::debug!(error = %e, "redis {what}: once more");
                        tokio::time::sleep(pause).await;
                        self.raw(cmd).await
                    }
                    None => Err(e),
                },
                ok => ok,
            }
        };
        match self.bounded(fut).await {
            Some(r) => r.map_err(|e| map(e, what)),
            None => Err(timeout_err(what, self.deadline)),
        }
    }

    /// Run a script: `EVALSHA`, and on `NOSCRIPT` the full `EVAL` (which also caches it).
    /// With [`Repeat::Safe`], a script that failed on a dead connection is sent once more on a
    /// fresh one.
    pub(crate) async fn eval<T: FromRedisValue, A: AsRef<[u8]>>(
        &self,
        lua: &Lua,
        keys: &[Vec<u8>],
        args: &[A],
        repeat: Repeat,
        what: &str,
    ) -> Result<T> {
        let once = || async {
            match self.raw(&eval_cmd(lua, keys, args, true)).await {
                Err(e) if is_noscript(&e) => {
                    tracing::debug!(sha = %lua.sha, "redis script cache cold; sending EVAL");
                    self.raw(&eval_cmd(lua, keys, args, false)).await
                }
                other => other,
            }
        };
        let fut = async {
            match once().await {
                Err(e) if repeat == Repeat::Safe => match again_after(&e) {
                    Some(pause) => {
                        tracing::debug!(error = %e, "redis {what}: once more");
                        tokio::time::sleep(pause).await;
                        once().await
                    }
                    None => Err(e),
                },
                other => other,
            }
        };
        match self.bounded(fut).await {
            Some(r) => r.map_err(|e| map_err(e, what)),
            None => Err(timeout_err(what, self.deadline)),
        }
    }

    /// Run several invocations of one script in one pipeline (one round trip), one result
    /// each. Invocations from the first `NOSCRIPT` answer on are sent again with `EVAL`, in
    /// order (a `NOSCRIPT` answer wrote nothing; re-sending the later ones keeps their order
    /// and a commit applied twice writes the same bytes).
    pub(crate) async fn eval_many(
        &self,
        lua: &Lua,
        calls: &[ScriptCall<'_>],
        what: &str,
    ) -> Result<Vec<RedisResult<Value>>> {
        let fut = async {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for (k, a) in calls {
                pipe.add_command(eval_cmd(lua, k, a, true));
            }
            let mut out = self.raw_pipe(&pipe).await?;
            if let Some(first) = out
                .iter()
                .position(|r| matches!(r, Err(e) if is_noscript(e)))
            {
                let mut again = redis::pipe();
                again.ignore_errors();
                for (k, a) in &calls[first..] {
                    again.add_command(eval_cmd(lua, k, a, false));
                }
                let redo = self.raw_pipe(&again).await?;
                out.truncate(first);
                out.extend(redo);
            }
            Ok::<_, RedisError>(out)
        };
        match self.bounded(fut).await {
            Some(r) => r.map_err(|e| map_err(e, what)),
            None => Err(timeout_err(what, self.deadline)),
        }
    }

    /// Two scripts in one round trip on a single node, applied in order: `first` as `EVAL`
    /// with its full text (a cold script cache cannot skip it while `second` runs), then
    /// `second` as `EVALSHA`, sent again alone as `EVAL` when it answers `NOSCRIPT` (it ran
    /// nothing; `first` has run). Each answer as the server gave it; neither is re-sent on a
    /// dead connection. `Unsupported` on Cluster, where the two may live on two nodes.
    pub(crate) async fn eval_then(
        &self,
        first: OwnedCall<'_>,
        second: OwnedCall<'_>,
        what: &str,
    ) -> Result<(RedisResult<Value>, RedisResult<Value>)> {
        if self.is_cluster() {
            return Err(Error::new(
                afk_core::ErrorKind::Unsupported,
                format!("redis {what}: two scripts in one pipeline need a single node"),
            ));
        }
        let fut = async {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            pipe.add_command(eval_cmd(first.0, first.1, first.2, false));
            pipe.add_command(eval_cmd(second.0, second.1, second.2, true));
            let mut out = self.raw_pipe(&pipe).await?.into_iter();
            let (Some(a), Some(b), None) = (out.next(), out.next(), out.next()) else {
                return Err(RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "a pipeline of two scripts did not answer two results",
                )));
            };
            let b = match b {
                Err(e) if is_noscript(&e) => {
                    tracing::debug!(sha = %second.0.sha, "redis script cache cold; sending EVAL");
                    self.raw(&eval_cmd(second.0, second.1, second.2, false))
                        .await
                }
                other => other,
            };
            Ok::<_, RedisError>((a, b))
        };
        match self.bounded(fut).await {
            Some(r) => r.map_err(|e| map_err(e, what)),
            None => Err(timeout_err(what, self.deadline)),
        }
    }
}

/// The cluster client reports a failed first connection as a string, which hides a TLS
/// handshake failure. After such a failure, connect to each seed as a single node: a TLS error
/// that retrying cannot fix (untrusted certificate, client certificate refused) replaces
/// `err`, so it maps to `InvalidConfig` like on a single node. Otherwise `err` stands.
async fn diagnose_tls(
    cfg: &RedisConfig,
    certs: Option<redis::TlsCertificates>,
    err: RedisError,
) -> RedisError {
    let conf = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(cfg.connect_timeout()))
        .set_response_timeout(Some(cfg.response_timeout()));
    for (h, p) in &cfg.nodes {
        let client = node_info(cfg, h, *p).and_then(|info| match certs.clone() {
            Some(certs) => redis::Client::build_with_tls(info, certs),
            None => redis::Client::open(info),
        });
        let probe = match client {
            Ok(c) => c.get_multiplexed_async_connection_with_config(&conf).await,
            Err(e) => Err(e),
        };
        if let Err(e) = probe
            && is_tls_config_error(&e)
        {
            return e;
        }
    }
    err
}

fn eval_cmd<A: AsRef<[u8]>>(lua: &Lua, keys: &[Vec<u8>], args: &[A], sha: bool) -> Cmd {
    let mut cmd = if sha {
        redis::cmd("EVALSHA")
    } else {
        redis::cmd("EVAL")
    };
    if sha {
        cmd.arg(lua.sha.as_bytes());
    } else {
        cmd.arg(lua.code.as_bytes());
    }
    cmd.arg(keys.len()).arg(keys);
    for a in args {
        cmd.arg(a.as_ref());
    }
    cmd
}

pub(crate) fn timeout_err(what: &str, after: Duration) -> Error {
    Error::unavailable(format!(
        "redis: {what} got no answer within {} ms",
        after.as_millis()
    ))
}
