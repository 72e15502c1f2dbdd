//! Throughput of decode + normalize (bytes → SSE events → `MessageDelta`s) for both providers
//! on realistic streams: thousands of small text chunks, then a tool call whose long
//! arguments arrive in many fragments, fed in network-sized reads of varying length.
//!
//! Run: `cargo bench --bench decode`. Criterion prints the median throughput per stream.
//! Time is the benchmark thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), not wall time, so the
//! figure stays meaningful on a shared 2-core machine where other builds compete for the CPU.

use std::hint::black_box;

use agentloop::provider::anthropic::AnthropicNormalizer;
use agentloop::provider::decode::normalize_chunks;
use agentloop::provider::http::ProviderKind;
use agentloop::provider::openai::OpenAiNormalizer;
use agentloop::provider::sse::{SseDecoder, SseNormalizer, SsePipeline};
use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

/// Thread CPU time in nanoseconds.
struct CpuTime;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Measurement for CpuTime {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (div, unit) = if typical < 1e3 {
            (1.0, "ns cpu")
        } else if typical < 1e6 {
            (1e3, "µs cpu")
        } else if typical < 1e9 {
            (1e6, "ms cpu")
        } else {
            (1e9, "s cpu")
        };
        values.iter_mut().for_each(|v| *v /= div);
        unit
    }
    fn scale_throughputs(&self, _typical: f64, t: &Throughput, values: &mut [f64]) -> &'static str {
        // values are ns per iteration → MB/s (10^6 bytes per second of CPU time).
        let bytes = match t {
            Throughput::Bytes(b) | Throughput::BytesDecimal(b) => *b as f64,
            Throughput::Elements(e) => *e as f64,
        };
        values.iter_mut().for_each(|v| *v = bytes * 1e3 / *v);
        "MB/s"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}
use serde_json::json;

const WORDS: &[&str] = &[
    " the", " model", " streams", " small", " pieces", " of", " text,", " wörld", " é", " 😀",
    " and", " then", " calls", " a", " tool", ".",
];

fn openai_stream(text_chunks: usize, arg_fragments: usize) -> Vec<u8> {
    let head = r#""id":"chatcmpl-A1b2C3d4E5","object":"chat.completion.chunk","created":1718000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_abc123""#;
    let mut s = String::new();
    for i in 0..text_chunks {
        let piece = json!(WORDS[i % WORDS.len()]);
        s.push_str(&format!(
            "data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{piece}}},\"logprobs\":null,\"finish_reason\":null}}],\"usage\":null}}\n\n"
        ));
    }
    s.push_str(&format!("data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":0,\"id\":\"call_XYZ\",\"type\":\"function\",\"function\":{{\"name\":\"append_line\",\"arguments\":\"\"}}}}]}},\"finish_reason\":null}}]}}\n\n"));
    s.push_str(&format!("data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":0,\"function\":{{\"arguments\":{}}}}}]}},\"finish_reason\":null}}]}}\n\n", json!("{\"path\": \"out.txt\", \"line\": \"")));
    for i in 0..arg_fragments {
        let frag = json!(format!(
            "{} lorem ipsum \\\"quoted\\\" dolor sit amet {i}",
            WORDS[i % WORDS.len()]
        ));
        s.push_str(&format!("data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":0,\"function\":{{\"arguments\":{frag}}}}}]}},\"finish_reason\":null}}]}}\n\n"));
    }
    s.push_str(&format!("data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":0,\"function\":{{\"arguments\":\"\\\"}}\"}}}}]}},\"finish_reason\":null}}]}}\n\n"));
    s.push_str(&format!("data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"tool_calls\"}}]}}\n\n"));
    s.push_str(&format!("data: {{{head},\"choices\":[],\"usage\":{{\"prompt_tokens\":1200,\"completion_tokens\":900,\"total_tokens\":2100}}}}\n\n"));
    s.push_str("data: [DONE]\n\n");
    s.into_bytes()
}

fn anthropic_stream(text_chunks: usize, arg_fragments: usize) -> Vec<u8> {
    let mut s = String::new();
    s.push_str("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XYZ\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":1200,\"output_tokens\":1}}}\n\n");
    s.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    for i in 0..text_chunks {
        let piece = json!(WORDS[i % WORDS.len()]);
        s.push_str(&format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{piece}}}}}\n\n"));
        if i % 500 == 0 {
            s.push_str("event: ping\ndata: {\"type\": \"ping\"}\n\n");
        }
    }
    s.push_str(
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    );
    s.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01\",\"name\":\"append_line\",\"input\":{}}}\n\n");
    s.push_str(&format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":{}}}}}\n\n", json!("{\"path\": \"out.txt\", \"line\": \"")));
    for i in 0..arg_fragments {
        let frag = json!(format!(
            "{} lorem ipsum \\\"quoted\\\" dolor sit amet {i}",
            WORDS[i % WORDS.len()]
        ));
        s.push_str(&format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":{frag}}}}}\n\n"));
    }
    s.push_str(&format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":{}}}}}\n\n", json!("\"}")));
    s.push_str(
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
    );
    s.push_str("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":900}}\n\n");
    s.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    s.into_bytes()
}

/// Network-sized reads of varying length (0.5–16 KiB), deterministic.
fn reads(body: &[u8]) -> Vec<&[u8]> {
    let sizes = [512usize, 1400, 4096, 16384, 2920, 8192, 700];
    let mut out = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < body.len() {
        let end = (at + sizes[i % sizes.len()]).min(body.len());
        out.push(&body[at..end]);
        at = end;
        i += 1;
    }
    out
}

fn drive<N: SseNormalizer>(mut pipe: SsePipeline<N>, pieces: &[&[u8]]) -> usize {
    let mut out = Vec::new();
    let mut n = 0;
    for p in pieces {
        pipe.feed_into(p, &mut out);
        n += out.len();
        black_box(&out);
        out.clear();
    }
    n + black_box(pipe.finish()).len()
}

fn bench(c: &mut Criterion<CpuTime>) {
    let streams = [
        ("openai", ProviderKind::OpenAi, openai_stream(4000, 1500)),
        (
            "anthropic",
            ProviderKind::Anthropic,
            anthropic_stream(4000, 1500),
        ),
    ];
    let mut g = c.benchmark_group("decode_normalize");
    for (name, provider, body) in &streams {
        // Sanity: the stream completes.
        let check = normalize_chunks(*provider, reads(body));
        assert_eq!(
            check.last(),
            Some(&agentloop::MessageDelta::Finish),
            "{name}"
        );
        let pieces = reads(body);
        g.throughput(Throughput::Bytes(body.len() as u64));
        // As the HTTP client does it: one pipeline, deltas drained after every read.
        g.bench_function(*name, |b| {
            b.iter(|| match provider {
                ProviderKind::OpenAi => drive(SsePipeline::new(OpenAiNormalizer::new()), &pieces),
                ProviderKind::Anthropic => {
                    drive(SsePipeline::new(AnthropicNormalizer::new()), &pieces)
                }
                ProviderKind::OpenAiResponses => drive(
                    SsePipeline::new(
                        agentloop::provider::openai_responses::ResponsesNormalizer::new(),
                    ),
                    &pieces,
                ),
                other => unreachable!("no {other} stream in this benchmark"),
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group("sse_only");
    for (name, _, body) in &streams {
        let pieces = reads(body);
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_function(*name, |b| {
            b.iter(|| {
                let mut d = SseDecoder::new();
                let mut n = 0usize;
                for p in &pieces {
                    d.feed_each(p, |ev| n += ev.data.len()).unwrap();
                }
                black_box((n, d.finish()))
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(CpuTime);
    targets = bench
}
criterion_main!(benches);
