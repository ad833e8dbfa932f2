//! Thin wrappers over the S3 calls the store makes, each returning a classified [`Failure`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use afk_core::{Error, Result};
use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};

use crate::error::{Failure, classify};

/// Most keys one `DeleteObjects` request may carry (an S3 limit).
pub(crate) const DELETE_BATCH: usize = 1000;

/// The condition of a PUT.
#[derive(Debug, Clone)]
pub(crate) enum Cond {
    /// `If-None-Match: *`: create only.
    Create,
    /// `If-Match: <etag>`: replace only this version.
    Match(String),
}

/// Requests a store sent and the bytes it uploaded, counted as sent (attempts the SDK retries
/// count once). See [`S3Store::traffic`](crate::S3Store::traffic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct S3Traffic {
    /// `GetObject` requests.
    pub gets: u64,
    /// `PutObject` requests (records, index segments, heads).
    pub puts: u64,
    /// Body bytes of every `PutObject`.
    pub put_bytes: u64,
    /// `PutObject` requests of run heads.
    pub head_puts: u64,
    /// Body bytes of those head writes.
    pub head_bytes: u64,
    /// `ListObjectsV2` pages and `DeleteObject(s)` requests.
    pub other: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    gets: AtomicU64,
    puts: AtomicU64,
    put_bytes: AtomicU64,
    head_puts: AtomicU64,
    head_bytes: AtomicU64,
    other: AtomicU64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> S3Traffic {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        S3Traffic {
            gets: get(&self.gets),
            puts: get(&self.puts),
            put_bytes: get(&self.put_bytes),
            head_puts: get(&self.head_puts),
            head_bytes: get(&self.head_bytes),
            other: get(&self.other),
        }
    }
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// The S3 client bound to one bucket.
#[derive(Debug, Clone)]
pub(crate) struct Ops {
    pub(crate) client: Client,
    pub(crate) bucket: String,
    pub(crate) counters: Arc<Counters>,
}

impl Ops {
    /// GET an object: its bytes and ETag, or `None` when it does not exist.
    pub(crate) async fn get(
        &self,
        key: &str,
    ) -> Result<Option<(Vec<u8>, Option<String>)>, Failure> {
        self.get_object(key, None).await
    }

    /// GET `len` (at least 1) bytes of an object from byte `start`, or `None` when it does not
    /// exist.
    pub(crate) async fn get_range(
        &self,
        key: &str,
        start: u64,
        len: u64,
    ) -> Result<Option<Vec<u8>>, Failure> {
        let range = format!("bytes={start}-{}", start + len.saturating_sub(1));
        Ok(self
            .get_object(key, Some(range))
            .await?
            .map(|(bytes, _)| bytes))
    }

    async fn get_object(
        &self,
        key: &str,
        range: Option<String>,
    ) -> Result<Option<(Vec<u8>, Option<String>)>, Failure> {
        bump(&self.counters.gets, 1);
        let out = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .set_range(range)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) => {
                return match classify(e, &self.bucket, "GetObject") {
                    Failure::Missing => Ok(None),
                    other => Err(other),
                };
            }
        };
        let etag = out.e_tag().map(str::to_owned);
        let body = out.body.collect().await.map_err(|e| Failure::Other {
            error: Error::unavailable(format!(
                "GetObject in bucket {:?}: body read failed",
                self.bucket
            ))
            .with_source(e),
            ambiguous: false,
        })?;
        Ok(Some((body.into_bytes().to_vec(), etag)))
    }

    /// PUT an object under a condition; returns its new ETag.
    pub(crate) async fn put(
        &self,
        key: &str,
        body: Vec<u8>,
        cond: Cond,
    ) -> Result<Option<String>, Failure> {
        self.put_with(key, body, cond, None).await
    }

    /// [`Ops::put`] with the client's timeouts replaced by `timeouts` for this request, if any
    /// (the open probe: a few bytes that a working service takes well under a second for).
    pub(crate) async fn put_with(
        &self,
        key: &str,
        body: Vec<u8>,
        cond: Cond,
        timeouts: Option<aws_config::timeout::TimeoutConfig>,
    ) -> Result<Option<String>, Failure> {
        let len = body.len() as u64;
        bump(&self.counters.puts, 1);
        bump(&self.counters.put_bytes, len);
        if key.ends_with("/head") {
            bump(&self.counters.head_puts, 1);
            bump(&self.counters.head_bytes, len);
        }
        let req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(ByteStream::from(body));
        let req = match cond {
            Cond::Create => req.if_none_match("*"),
            Cond::Match(etag) => req.if_match(etag),
        };
        let sent = match timeouts {
            None => req.send().await,
            Some(t) => {
                req.customize()
                    .config_override(aws_sdk_s3::config::Builder::default().timeout_config(t))
                    .send()
                    .await
            }
        };
        match sent {
            Ok(out) => Ok(out.e_tag().map(str::to_owned)),
            Err(e) => Err(classify(e, &self.bucket, "PutObject")),
        }
    }

    /// Every key under `prefix` (all pages), or with `delimiter = true` the immediate
    /// sub-folders (`CommonPrefixes`) instead.
    pub(crate) async fn list(&self, prefix: &str, folders: bool) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut req = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(prefix);
            if folders {
                req = req.delimiter("/");
            }
            bump(&self.counters.other, 1);
            let page = req
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| {
                    classify(e, &self.bucket, "ListObjectsV2")
                        .into_error(&self.bucket, "ListObjectsV2")
                })?;
            if folders {
                out.extend(
                    page.common_prefixes()
                        .iter()
                        .filter_map(|p| p.prefix().map(str::to_owned)),
                );
            } else {
                out.extend(
                    page.contents()
                        .iter()
                        .filter_map(|o| o.key().map(str::to_owned)),
                );
            }
            match page.next_continuation_token() {
                Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_owned()),
                _ => return Ok(out),
            }
        }
    }

    /// One page of the keys under `prefix`, in key order, after `start_after` (any key), at
    /// most `max_keys`; and whether more follow.
    pub(crate) async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<String>,
        max_keys: usize,
    ) -> Result<(Vec<String>, bool)> {
        bump(&self.counters.other, 1);
        let page = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .set_start_after(start_after)
            .max_keys(i32::try_from(max_keys).unwrap_or(i32::MAX))
            .send()
            .await
            .map_err(|e| {
                classify(e, &self.bucket, "ListObjectsV2").into_error(&self.bucket, "ListObjectsV2")
            })?;
        let keys = page
            .contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect();
        Ok((keys, page.is_truncated() == Some(true)))
    }

    /// Delete objects with `DeleteObjects`, at most [`DELETE_BATCH`] per request. Missing keys
    /// are not an error.
    pub(crate) async fn delete_many(&self, keys: &[String]) -> Result<()> {
        for chunk in keys.chunks(DELETE_BATCH) {
            let ids = chunk
                .iter()
                .map(|k| ObjectIdentifier::builder().key(k).build())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| {
                    Error::unexpected("could not build DeleteObjects request").with_source(e)
                })?;
            let delete = Delete::builder()
                .set_objects(Some(ids))
                .quiet(true)
                .build()
                .map_err(|e| {
                    Error::unexpected("could not build DeleteObjects request").with_source(e)
                })?;
            bump(&self.counters.other, 1);
            let out = self
                .client
                .delete_objects()
                .bucket(&self.bucket)
                .delete(delete)
                .send()
                .await
                .map_err(|e| {
                    classify(e, &self.bucket, "DeleteObjects")
                        .into_error(&self.bucket, "DeleteObjects")
                })?;
            if let Some(first) = out.errors().first() {
                return Err(Error::unavailable(format!(
                    "DeleteObjects in bucket {:?}: {} of {} objects not deleted (first: {} {})",
                    self.bucket,
                    out.errors().len(),
                    chunk.len(),
                    first.code().unwrap_or("?"),
                    first.message().unwrap_or("")
                )));
            }
        }
        Ok(())
    }

    /// Delete one object unconditionally (missing is fine).
    pub(crate) async fn delete_one(&self, key: &str) -> Result<()> {
        bump(&self.counters.other, 1);
        match self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => match classify(e, &self.bucket, "DeleteObject") {
                Failure::Missing => Ok(()),
                other => Err(other.into_error(&self.bucket, "DeleteObject")),
            },
        }
    }
}
