//! Each target's log lines, collected while the run goes, so that the GitHub sink can replay
//! them per target in a `::group::` at the end (the lines of concurrent targets interleave on
//! stderr). A `tracing` layer: every event inside a `target` span (see engine/fleet.rs) is
//! kept under that span's target name, at info level and above, bounded per target.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// Lines kept per target; the newest are kept.
const MAX_LINES: usize = 2000;

/// The collected lines, by target.
#[derive(Debug, Default)]
pub struct TargetLogs {
    lines: Mutex<HashMap<String, Vec<String>>>,
}

impl TargetLogs {
    fn push(&self, target: &str, line: String) {
        let Ok(mut map) = self.lines.lock() else {
            return;
        };
        let lines = map.entry(target.to_string()).or_default();
        if lines.len() >= MAX_LINES {
            lines.remove(0);
        }
        lines.push(line);
    }

    /// The lines of `target` so far (oldest first).
    pub fn lines(&self, target: &str) -> Vec<String> {
        self.lines
            .lock()
            .ok()
            .and_then(|m| m.get(target).cloned())
            .unwrap_or_default()
    }
}

/// The process-wide store the layer writes to. Process-wide on purpose: the tracing
/// subscriber that feeds it is installed once per process (main.rs) and sees every task's
/// events; the run reads it back by target name when it ends.
pub fn store() -> &'static TargetLogs {
    static STORE: OnceLock<TargetLogs> = OnceLock::new();
    STORE.get_or_init(TargetLogs::default)
}

/// The layer to install next to the stderr formatter (see main.rs).
pub fn capture_layer() -> CaptureLayer {
    CaptureLayer { logs: store() }
}

pub struct CaptureLayer {
    logs: &'static TargetLogs,
}

/// The target name recorded on a `target` span.
struct TargetName(String);

impl<S> Layer<S> for CaptureLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != "target" {
            return;
        }
        let mut v = Fields::default();
        attrs.record(&mut v);
        if let (Some(name), Some(span)) = (v.target, ctx.span(id)) {
            span.extensions_mut().insert(TargetName(name));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if *event.metadata().level() > tracing::Level::INFO {
            return;
        }
        let Some(scope) = ctx.event_scope(event) else {
            return;
        };
        let Some(target) = scope
            .from_root()
            .find_map(|span| span.extensions().get::<TargetName>().map(|t| t.0.clone()))
        else {
            return;
        };
        let mut v = Fields::default();
        event.record(&mut v);
        let mut line = format!(
            "{} {:>5} {}",
            jiff::Timestamp::now().strftime("%H:%M:%S%.3f"),
            event.metadata().level(),
            v.message
        );
        for (k, val) in &v.rest {
            let _ = write!(line, " {k}={val}");
        }
        self.logs.push(&target, line);
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    target: Option<String>,
    rest: Vec<(String, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_string(),
            "target" => self.target = Some(value.to_string()),
            name => self.rest.push((name.to_string(), value.to_string())),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "target" => self.target = Some(format!("{value:?}")),
            name => self.rest.push((name.to_string(), format!("{value:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Instrument;
    use tracing_subscriber::layer::SubscriberExt;

    #[tokio::test]
    async fn lines_are_kept_per_target() {
        let logs: &'static TargetLogs = Box::leak(Box::default());
        let subscriber = tracing_subscriber::registry().with(CaptureLayer { logs });
        let _guard = tracing::subscriber::set_default(subscriber);
        async {
            tracing::info!(objects = 3, "applied");
            tracing::debug!("not kept");
        }
        .instrument(tracing::error_span!("target", target = %"eu"))
        .await;
        tracing::error_span!("target", target = %"us").in_scope(|| {
            tracing::warn!("slow");
            tracing::info_span!("inner").in_scope(|| tracing::info!("nested"));
        });
        tracing::info!("outside any target");
        let eu = logs.lines("eu");
        assert_eq!(eu.len(), 1, "{eu:?}");
        assert!(eu[0].ends_with(" INFO applied objects=3"), "{eu:?}");
        let us = logs.lines("us");
        assert!(
            us[0].ends_with(" WARN slow") && us[1].ends_with(" INFO nested"),
            "{us:?}"
        );
        assert!(logs.lines("ap").is_empty());
    }
}
