//! `--mcp "CMD ARGS"` / `--mcp-http URL` (MCP tool servers for `run`, `resume` and `tools`),
//! and the `agentloop tools` command.

use std::process::ExitCode;

use clap::Args;

use agentloop::mcp::{McpOptions, McpServer};
use agentloop::tools::ToolRegistry;

/// An MCP server given on the command line: a program to start (stdio) or a URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum McpEndpoint {
    /// `--mcp "CMD ARGS"`.
    Stdio { command: String, args: Vec<String> },
    /// `--mcp-http URL`.
    Http { url: String },
}

/// The MCP servers whose tools an agent gets.
#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// An MCP server to start and use the tools of, over stdio: "CMD ARGS", split like a POSIX
    /// shell splits words (quotes and backslashes; no variables, globs or pipes). Repeatable.
    #[arg(long = "mcp", value_name = "CMD ARGS", value_parser = parse_stdio)]
    pub stdio: Vec<McpEndpoint>,
    /// An MCP server over streamable HTTP, by URL (e.g. http://127.0.0.1:3001/mcp). Repeatable.
    #[arg(long = "mcp-http", value_name = "URL")]
    pub http: Vec<String>,
}

/// Splits `CMD ARGS` with shell-words rules into a stdio endpoint.
fn parse_stdio(line: &str) -> Result<McpEndpoint, String> {
    let mut words = shell_words::split(line)
        .map_err(|e| format!("cannot split {line:?} into words: {e}"))?
        .into_iter();
    let command = words
        .next()
        .ok_or_else(|| "an empty command (expected \"CMD ARGS\")".to_string())?;
    Ok(McpEndpoint::Stdio {
        command,
        args: words.collect(),
    })
}

impl McpArgs {
    /// Connects every server, in the order given (stdio first, then HTTP).
    pub(crate) async fn connect(&self) -> Result<Vec<McpServer>, String> {
        let endpoints = self.stdio.iter().cloned().chain(
            self.http
                .iter()
                .map(|url| McpEndpoint::Http { url: url.clone() }),
        );
        let mut servers = Vec::new();
        for endpoint in endpoints {
            let server = match endpoint {
                McpEndpoint::Stdio { command, args } => {
                    McpServer::connect_stdio_with(command, args, McpOptions::default()).await
                }
                McpEndpoint::Http { url } => {
                    McpServer::connect_http_with(url, McpOptions::default()).await
                }
            }
            .map_err(|e| e.to_string())?;
            servers.push(server);
        }
        Ok(servers)
    }
}

/// Adds the servers' tools to `tools`, saying on stderr which tool replaced one of the same
/// name (a built-in or an earlier server's).
pub(crate) fn add_tools(tools: &mut ToolRegistry, servers: &[McpServer]) {
    for server in servers {
        // Tools whose names a provider would refuse were left out at connect: say which.
        for skipped in server.skipped() {
            crate::out::errln!(
                "[mcp] warning: MCP server {}: {}",
                crate::out::line(server.label()),
                crate::out::line(&skipped.to_string())
            );
        }
        for tool in server.tools() {
            let name = tool.spec().name;
            if tools.get(&name).is_some() {
                crate::out::errln!(
                    "[mcp] warning: tool {} of MCP server {} replaces a tool of the same name",
                    crate::out::line(&name),
                    server.label()
                );
            }
            tools.insert(tool);
        }
    }
}

/// Arguments of `agentloop tools`.
#[derive(Debug, Args)]
pub(crate) struct ToolsArgs {
    /// MCP servers whose tools to list besides the built-ins.
    #[command(flatten)]
    pub mcp: McpArgs,
}

/// Runs `agentloop tools`: every tool an agent would get (built-ins, then the MCP servers'),
/// one a line: the name and the first line of its description.
pub(crate) fn tools_main(args: ToolsArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return crate::run::fail(format!("cannot start the runtime: {e}")),
    };
    let servers = match rt.block_on(args.mcp.connect()) {
        Ok(s) => s,
        Err(e) => return crate::run::fail(e),
    };
    let mut tools = ToolRegistry::defaults();
    add_tools(&mut tools, &servers);
    let specs = tools.specs();
    // A server names and describes its tools: one line each, nothing for the terminal.
    let names: Vec<String> = specs
        .iter()
        .map(|s| crate::out::line(&s.name).into_owned())
        .collect();
    // Padding only: names longer than a provider allows (64) are not padded further (a width
    // above 65,535 would make the formatter panic).
    let width = names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(0)
        .min(64);
    for (spec, name) in specs.iter().zip(&names) {
        let first = spec.description.lines().next().unwrap_or("").trim();
        crate::out::outln!("{name:width$}  {}", crate::out::line(first));
    }
    // The children are killed while the runtime still runs.
    rt.block_on(async move { drop(servers) });
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio(line: &str) -> (String, Vec<String>) {
        match parse_stdio(line) {
            Ok(McpEndpoint::Stdio { command, args }) => (command, args),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn mcp_commands_split_like_a_shell() {
        assert_eq!(
            stdio("python3 -m mcp_server_time"),
            (
                "python3".into(),
                vec!["-m".into(), "mcp_server_time".into()]
            )
        );
        assert_eq!(
            stdio(r#"sh -c 'echo $$ > "a b"; exec srv' x\ y "q\"t""#),
            (
                "sh".into(),
                vec![
                    "-c".into(),
                    r#"echo $$ > "a b"; exec srv"#.into(),
                    "x y".into(),
                    "q\"t".into()
                ]
            )
        );
    }

    #[test]
    fn empty_and_unbalanced_commands_are_refused() {
        assert!(parse_stdio("   ").is_err());
        assert!(parse_stdio("srv 'open").is_err());
    }
}
