//! `--otlp-endpoint URL` on `run`, `resume` and `chat`: each run's spans (OpenTelemetry GenAI
//! conventions, `agentloop::otlp`) sent to a collector over OTLP/HTTP when the run ends. A
//! collector that is down or refuses the spans costs a warning on stderr, never the run.

use std::sync::Arc;

use agentloop::otlp::OtlpExporter;

use crate::run::AgentArgs;

/// The exporter the flags ask for: none without `--otlp-endpoint`; an error for a malformed
/// `--otlp-header`.
pub(crate) fn exporter(args: &AgentArgs) -> Result<Option<Arc<OtlpExporter>>, String> {
    let Some(endpoint) = &args.otlp_endpoint else {
        if !args.otlp_header.is_empty() || args.otlp_content {
            return Err("--otlp-header and --otlp-content need --otlp-endpoint".into());
        }
        return Ok(None);
    };
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        return Err(format!(
            "--otlp-endpoint {endpoint}: not an http:// or https:// URL"
        ));
    }
    let mut exporter = OtlpExporter::new(endpoint.clone()).include_content(args.otlp_content);
    for h in &args.otlp_header {
        let Some((name, value)) = h.split_once('=') else {
            return Err(format!("--otlp-header {h}: not NAME=VALUE"));
        };
        exporter = exporter.header(name.trim(), value.trim());
    }
    Ok(Some(Arc::new(exporter)))
}

/// Sends the spans of a run that ended; a failure is a warning.
pub(crate) async fn send(exporter: &OtlpExporter, trace: &agentloop::trace::Trace) -> String {
    match exporter.send(trace).await {
        Ok(n) => format!("[otlp] sent {n} span{}", if n == 1 { "" } else { "s" }),
        Err(e) => format!("[otlp] warning: spans not sent: {e}"),
    }
}
