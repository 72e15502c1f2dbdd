//! `agentloop decode`: decode a captured provider response into the normalized message.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::regular_file::read_regular_file;
use agentloop::provider::decode::decode;
use agentloop::provider::http::ProviderKind;

use crate::out::errln;

/// Arguments of `agentloop decode`.
#[derive(Debug, Args)]
pub(crate) struct DecodeArgs {
    /// The wire format of the capture.
    #[arg(long, value_parser = provider_parser())]
    pub provider: ProviderKind,
    /// The file is a raw HTTP response (status line, headers, blank line, body).
    #[arg(long)]
    pub http: bool,
    /// Also print the normalized delta sequence (one JSON line per delta, before the report).
    #[arg(long)]
    pub deltas: bool,
    /// A captured raw SSE response body (or HTTP response with `--http`).
    pub file: PathBuf,
}

/// The `--provider` parser: the names of the library's registry.
fn provider_parser() -> impl clap::builder::TypedValueParser<Value = ProviderKind> {
    use clap::builder::TypedValueParser;
    let names = ProviderKind::ALL.iter().map(|k| k.as_str());
    clap::builder::PossibleValuesParser::new(names).try_map(|s| s.parse::<ProviderKind>())
}

/// Runs the command: prints one JSON object; exit 0 when it decoded (even to an error outcome).
pub(crate) fn main(args: DecodeArgs) -> ExitCode {
    let bytes = match read_regular_file(&args.file, crate::out::INPUT_LIMIT) {
        Ok(b) => b,
        Err(e) => {
            errln!("error: {}: {e}", args.file.display());
            return ExitCode::from(2);
        }
    };
    let report = decode(args.provider, &bytes, args.http);
    if args.deltas {
        for d in &report.deltas {
            let line = serde_json::to_string(d).unwrap_or_default();
            crate::out::stdout_raw(&format!("{}\n", crate::out::json(&line)));
        }
    }
    match serde_json::to_string_pretty(&report) {
        Ok(s) => {
            crate::out::stdout_raw(&format!("{}\n", crate::out::json(&s)));
            ExitCode::SUCCESS
        }
        Err(e) => {
            errln!("error: cannot print the report: {e}");
            ExitCode::from(2)
        }
    }
}
