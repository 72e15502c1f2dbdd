//! Fault injection: a store wrapper that fails chosen appends.

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;

use super::{Entry, SessionStore, StoreError};

/// Where the injected failure happens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FaultPoint {
    /// Fail before anything is written (the entry is not stored).
    #[default]
    BeforeWrite,
    /// Write the entry, then report failure (like an fsync error after a successful
    /// write: the store holds the entry but the caller was told it failed).
    AfterWrite,
}

/// Wraps a store and fails its `k`-th append (1-based, counting every call), and with
/// [`sticky`](FaultyStore::sticky) every append after it too. Loads pass through.
#[derive(Debug)]
pub struct FaultyStore<S> {
    inner: S,
    fail_at: u64,
    sticky: bool,
    point: FaultPoint,
    appends: AtomicU64,
}

impl<S> FaultyStore<S> {
    /// Fails the `k`-th append once (`k == 0`: never).
    pub fn new(inner: S, k: u64) -> Self {
        FaultyStore {
            inner,
            fail_at: k,
            sticky: false,
            point: FaultPoint::BeforeWrite,
            appends: AtomicU64::new(0),
        }
    }

    /// Also fails every append after the `k`-th (a dead disk).
    pub fn sticky(mut self) -> Self {
        self.sticky = true;
        self
    }

    /// Sets where the failure happens.
    pub fn at(mut self, point: FaultPoint) -> Self {
        self.point = point;
        self
    }

    /// Appends attempted so far (including failed ones).
    pub fn appends(&self) -> u64 {
        self.appends.load(Ordering::SeqCst)
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Unwraps the store.
    pub fn into_inner(self) -> S {
        self.inner
    }

    fn fails(&self, n: u64) -> bool {
        self.fail_at != 0 && (n == self.fail_at || (self.sticky && n > self.fail_at))
    }
}

#[async_trait]
impl<S: SessionStore> SessionStore for FaultyStore<S> {
    async fn load(&self, session: &str) -> Result<Vec<Entry>, StoreError> {
        self.inner.load(session).await
    }

    async fn append(&self, session: &str, entry: &Entry) -> Result<(), StoreError> {
        let n = self.appends.fetch_add(1, Ordering::SeqCst) + 1;
        if !self.fails(n) {
            return self.inner.append(session, entry).await;
        }
        if self.point == FaultPoint::AfterWrite {
            self.inner.append(session, entry).await?;
        }
        Err(StoreError::Other(format!(
            "injected fault: append #{n} ({:?})",
            self.point
        )))
    }

    async fn load_with_report(
        &self,
        session: &str,
    ) -> Result<(Vec<Entry>, Vec<String>), StoreError> {
        self.inner.load_with_report(session).await
    }
}
