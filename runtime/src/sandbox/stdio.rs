//! The guest's stdout and stderr: captured in memory up to a cap, the rest silently dropped,
//! so a chatty guest is neither killed by a full pipe nor able to grow host memory.

use bytes::Bytes;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

/// Largest single write permit handed to the guest.
const WRITE_PERMIT: usize = 64 << 10;

/// A capped in-memory sink for one of the guest's output streams.
#[derive(Clone)]
pub struct CappedOutput {
    capacity: usize,
    buffer: Arc<Mutex<Vec<u8>>>,
    dropped: Arc<AtomicUsize>,
}

impl CappedOutput {
    pub fn new(capacity: usize) -> Self {
        CappedOutput {
            capacity,
            buffer: Arc::default(),
            dropped: Arc::default(),
        }
    }

    /// What the guest wrote, up to the cap.
    pub fn contents(&self) -> Vec<u8> {
        self.buffer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether the guest wrote nothing.
    pub fn is_empty(&self) -> bool {
        self.buffer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Bytes written beyond the cap.
    pub fn dropped(&self) -> usize {
        self.dropped.load(Ordering::Relaxed)
    }

    fn append(&self, bytes: &[u8]) {
        let mut buf = self.buffer.lock().unwrap_or_else(|p| p.into_inner());
        let room = self.capacity.saturating_sub(buf.len());
        let kept = bytes.len().min(room);
        buf.extend_from_slice(&bytes[..kept]);
        self.dropped
            .fetch_add(bytes.len() - kept, Ordering::Relaxed);
    }
}

impl IsTerminal for CappedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for CappedOutput {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(WRITE_PERMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CappedOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for CappedOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_up_to_the_cap_and_counts_the_rest() {
        let mut out = CappedOutput::new(5);
        out.write(Bytes::from_static(b"hello world")).unwrap();
        assert_eq!(out.contents(), b"hello");
        assert_eq!(out.dropped(), 6);
        assert_eq!(
            out.check_write().unwrap(),
            WRITE_PERMIT,
            "a full sink still accepts writes"
        );
    }
}
