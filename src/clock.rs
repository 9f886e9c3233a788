//! Time: the clock the runtime reads (replaceable, so tests move it by hand) and the
//! wall-clock stamp of events and logs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (event and log stamps).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `ms` since the Unix epoch as a UTC time a person reads:
/// `2026-12-02T05:54:14.123Z` (RFC 3339).
///
/// ```
/// assert_eq!(demiurge_mcp::clock::utc(0), "1970-01-01T00:00:00.000Z");
/// assert_eq!(demiurge_mcp::clock::utc(1_796_190_916_107), "2026-12-02T05:55:16.107Z");
/// assert_eq!(demiurge_mcp::clock::utc(1_709_164_800_000), "2024-02-29T00:00:00.000Z");
/// assert_eq!(demiurge_mcp::clock::utc(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
/// ```
pub fn utc(ms: u64) -> String {
    let (secs, millis) = (ms / 1000, ms % 1000);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days to a civil date in the proleptic Gregorian calendar (Howard Hinnant's
    // algorithm), in unsigned arithmetic: the epoch is after year 0.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// A source of time, replaceable in tests (failure cache expiry, approval TTL).
pub trait Clock: Send + Sync + 'static {
    /// The current instant as this clock sees it.
    fn now(&self) -> Instant;
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock {
    base: Instant,
    offset_ms: AtomicU64,
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock {
            base: Instant::now(),
            offset_ms: AtomicU64::new(0),
        }
    }
}

impl ManualClock {
    /// A clock at an arbitrary start.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.offset_ms
            .fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.base + Duration::from_millis(self.offset_ms.load(Ordering::SeqCst))
    }
}
