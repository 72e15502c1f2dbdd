//! Images and files from disk as content parts of a user message (`agentloop run --image PATH
//! --file PATH`, [`Prompt`]): the media type from the extension, a size bound, base64.
//!
//! | kind | extensions | media type |
//! |---|---|---|
//! | image | `png` | `image/png` |
//! | image | `jpg`, `jpeg` | `image/jpeg` |
//! | image | `gif` | `image/gif` |
//! | image | `webp` | `image/webp` |
//! | file | `pdf` | `application/pdf` |
//!
//! These are the types both providers take (OpenAI-compatible `image_url` / `file` parts,
//! Anthropic `image` / `document` blocks). Extensions are matched without regard to case.
//!
//! One prompt's images and files have at most [`MAX_ATTACHMENT_BYTES`] (10 MiB) together; a
//! file that would go beyond is refused before it is read. The bound is the session's: a
//! prompt is stored as one session entry, stores refuse an entry over 16 MiB
//! ([`DEFAULT_MAX_ENTRY_BYTES`](crate::store::DEFAULT_MAX_ENTRY_BYTES)), and base64 makes the
//! bytes a third larger. The servers have limits of their own (Anthropic: 5 MB per image,
//! 32 MB per request; OpenAI: 50 MB of files per request) and report them as a `bad_request`.
//! The path
//! may be a symbolic link; what it leads to must be a regular file (a FIFO or a device is
//! refused without blocking). Every failure is an [`AttachmentError`], never a panic.
//!
//! # Example
//!
//! ```no_run
//! use agentloop::attachment::Prompt;
//! use agentloop::prelude::*;
//!
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let agent = Agent::builder().model(ScriptedModel::demo()).build();
//! let prompt = Prompt::new("What does the chart show?").image("chart.png")?;
//! let out = agent.run_prompt("session-1", prompt).await?;
//! # let _ = out;
//! # Ok(())
//! # }
//! ```

use std::io::Read;
use std::path::{Path, PathBuf};

use base64::Engine as _;

use crate::message::{base64_decoded_len, ContentPart, MediaSource, Message};
use agentloop_store::regular_file::{open_regular, OpenError};

/// The most bytes of images and files one prompt carries: 10 MiB (see the module docs).
pub const MAX_ATTACHMENT_BYTES: u64 = 10 * 1024 * 1024;

/// Whether a path is attached as an image or as a file (a document).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AttachmentKind {
    /// An image (`--image`).
    Image,
    /// A file, e.g. a PDF (`--file`).
    File,
}

impl AttachmentKind {
    /// `image` or `file`.
    fn as_str(self) -> &'static str {
        match self {
            AttachmentKind::Image => "image",
            AttachmentKind::File => "file",
        }
    }
}

/// Why a path could not be attached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttachmentError {
    /// The extension is not one this kind of attachment takes (or there is none).
    #[error("{}: unknown {kind} type {:?} (known: {})", path.display(), extension, known(kind))]
    UnknownType {
        /// The path given.
        path: PathBuf,
        /// `image` or `file`.
        kind: &'static str,
        /// The extension found (empty when none).
        extension: String,
    },
    /// The file is larger than what is left of [`MAX_ATTACHMENT_BYTES`].
    #[error("{}: {size} bytes, more than the {limit} bytes left (a prompt's images and files may have {} bytes together)", path.display(), MAX_ATTACHMENT_BYTES)]
    TooLarge {
        /// The path given.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The bytes that were left for it.
        limit: u64,
    },
    /// The path leads to something other than a regular file.
    #[error("{}: not a regular file ({what})", path.display())]
    NotAFile {
        /// The path given.
        path: PathBuf,
        /// What is there.
        what: String,
    },
    /// The file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Unreadable {
        /// The path given.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
}

/// The extensions an attachment of `kind` (`image` or `file`) takes, for error messages.
fn known(kind: &str) -> &'static str {
    match kind {
        "image" => "png, jpg, jpeg, gif, webp",
        _ => "pdf",
    }
}

/// The media type of `path` attached as `kind`, from its extension.
pub(crate) fn media_type(
    kind: AttachmentKind,
    path: &Path,
) -> Result<&'static str, AttachmentError> {
    let extension = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let media = match (kind, extension.as_str()) {
        (AttachmentKind::Image, "png") => "image/png",
        (AttachmentKind::Image, "jpg" | "jpeg") => "image/jpeg",
        (AttachmentKind::Image, "gif") => "image/gif",
        (AttachmentKind::Image, "webp") => "image/webp",
        (AttachmentKind::File, "pdf") => "application/pdf",
        _ => {
            return Err(AttachmentError::UnknownType {
                path: path.to_path_buf(),
                kind: kind.as_str(),
                extension,
            })
        }
    };
    Ok(media)
}

/// The image at `path` as a content part (base64 with its media type).
pub fn image(path: impl AsRef<Path>) -> Result<ContentPart, AttachmentError> {
    attach(AttachmentKind::Image, path.as_ref(), MAX_ATTACHMENT_BYTES)
}

/// The file at `path` as a content part (base64 with its media type and file name).
pub fn file(path: impl AsRef<Path>) -> Result<ContentPart, AttachmentError> {
    attach(AttachmentKind::File, path.as_ref(), MAX_ATTACHMENT_BYTES)
}

/// `path` as a content part of `kind`, read whole; refused when it has more than `limit`
/// bytes.
pub(crate) fn attach(
    kind: AttachmentKind,
    path: &Path,
    limit: u64,
) -> Result<ContentPart, AttachmentError> {
    let media_type = media_type(kind, path)?;
    let bytes = read_bounded(path, limit)?;
    let data = base64::engine::general_purpose::STANDARD.encode(bytes);
    Ok(match kind {
        AttachmentKind::Image => ContentPart::image_base64(media_type, data),
        AttachmentKind::File => ContentPart::file_base64(
            media_type,
            data,
            path.file_name().map(|n| n.to_string_lossy().into_owned()),
        ),
    })
}

/// The bytes of the regular file `path` leads to, refused when more than `limit`.
fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, AttachmentError> {
    let unreadable = |source| AttachmentError::Unreadable {
        path: path.to_path_buf(),
        source,
    };
    // Links are resolved first: `open_regular` refuses a link in the last component.
    let resolved = std::fs::canonicalize(path).map_err(unreadable)?;
    let file =
        open_regular(&resolved, std::fs::OpenOptions::new().read(true)).map_err(|e| match e {
            OpenError::NotRegular(kind) => AttachmentError::NotAFile {
                path: path.to_path_buf(),
                what: kind.to_string(),
            },
            OpenError::Io(e) => unreadable(e),
        })?;
    let too_large = |size| AttachmentError::TooLarge {
        path: path.to_path_buf(),
        size,
        limit,
    };
    let size = file.metadata().map_err(unreadable)?.len();
    if size > limit {
        return Err(too_large(size));
    }
    // The file may grow after the check: read one byte past the limit at most.
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// A prompt: text, then images and files (content parts), for [`Agent::run_prompt`] and
/// [`Session::prompt_with`].
///
/// ```no_run
/// # async fn f(agent: agentloop::runtime::Agent) -> Result<(), Box<dyn std::error::Error>> {
/// use agentloop::attachment::Prompt;
/// let prompt = Prompt::new("What does the chart show?").image("chart.png")?;
/// let out = agent.run_prompt("s1", prompt).await?;
/// # let _ = out; Ok(()) }
/// ```
///
/// [`Agent::run_prompt`]: crate::runtime::Agent::run_prompt
/// [`Session::prompt_with`]: crate::session::Session::prompt_with
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Prompt {
    /// The text.
    pub text: String,
    /// The parts after it, in order.
    pub parts: Vec<ContentPart>,
    /// Subtask parts: `(tool, arguments)` calls, usually of a
    /// [`SubagentTool`](crate::subagent::SubagentTool), that the run makes before its first
    /// model step (row `planning_subtask`); the model then sees each call and its result.
    pub subtasks: Vec<(String, serde_json::Value)>,
}

impl Prompt {
    /// A prompt of `text` alone.
    pub fn new(text: impl Into<String>) -> Self {
        Prompt {
            text: text.into(),
            ..Prompt::default()
        }
    }

    /// Adds a subtask part: the run calls `tool` with `arguments` before its first model step
    /// (for a [`SubagentTool`](crate::subagent::SubagentTool), `{"task": "..."}`).
    pub fn subtask(mut self, tool: impl Into<String>, arguments: serde_json::Value) -> Self {
        self.subtasks.push((tool.into(), arguments));
        self
    }

    /// The machine inputs that queue this prompt's subtasks (row `active_subtask`).
    pub(crate) fn subtask_events(&self) -> Vec<agentloop_core::Event> {
        self.subtasks
            .iter()
            .map(|(tool, arguments)| agentloop_core::Event::Subtask {
                tool: tool.clone(),
                arguments: arguments.clone(),
            })
            .collect()
    }

    /// Adds the image at `path` ([`image`](fn@image)), within what is left of
    /// [`MAX_ATTACHMENT_BYTES`].
    pub fn image(self, path: impl AsRef<Path>) -> Result<Self, AttachmentError> {
        self.attach(AttachmentKind::Image, path.as_ref())
    }

    /// Adds the file at `path` ([`file`](fn@file)), within what is left of
    /// [`MAX_ATTACHMENT_BYTES`].
    pub fn file(self, path: impl AsRef<Path>) -> Result<Self, AttachmentError> {
        self.attach(AttachmentKind::File, path.as_ref())
    }

    fn attach(mut self, kind: AttachmentKind, path: &Path) -> Result<Self, AttachmentError> {
        let left = MAX_ATTACHMENT_BYTES.saturating_sub(self.attached_bytes());
        self.parts.push(attach(kind, path, left)?);
        Ok(self)
    }

    /// The bytes of the images and files given as data (what base64 decodes to).
    pub fn attached_bytes(&self) -> u64 {
        self.parts
            .iter()
            .map(|p| match p {
                ContentPart::Image {
                    source: MediaSource::Base64 { data, .. },
                }
                | ContentPart::File {
                    source: MediaSource::Base64 { data, .. },
                    ..
                } => base64_decoded_len(data) as u64,
                _ => 0,
            })
            .sum()
    }

    /// Adds a part built elsewhere (an image by URL, bytes already in memory, more text).
    pub fn part(mut self, part: ContentPart) -> Self {
        self.parts.push(part);
        self
    }

    /// The user message.
    pub fn into_message(self) -> Message {
        Message::user_with_parts(self.text, self.parts)
    }
}

impl From<&str> for Prompt {
    fn from(text: &str) -> Self {
        Prompt::new(text)
    }
}

impl From<String> for Prompt {
    fn from(text: String) -> Self {
        Prompt::new(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_come_from_the_extension_in_any_case() {
        for (kind, name, want) in [
            (AttachmentKind::Image, "a.png", "image/png"),
            (AttachmentKind::Image, "a.JPG", "image/jpeg"),
            (AttachmentKind::Image, "dir.x/a.jpeg", "image/jpeg"),
            (AttachmentKind::Image, "a.gif", "image/gif"),
            (AttachmentKind::Image, "a.WebP", "image/webp"),
            (AttachmentKind::File, "report.PDF", "application/pdf"),
        ] {
            assert_eq!(media_type(kind, Path::new(name)).ok(), Some(want), "{name}");
        }
        for (kind, name, ext) in [
            (AttachmentKind::Image, "a.pdf", "pdf"),
            (AttachmentKind::File, "a.png", "png"),
            (AttachmentKind::Image, "a.bmp", "bmp"),
            (AttachmentKind::File, "README", ""),
        ] {
            match media_type(kind, Path::new(name)) {
                Err(AttachmentError::UnknownType { extension, .. }) => assert_eq!(extension, ext),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_file_is_read_whole_and_encoded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.pdf");
        std::fs::write(&path, b"%PDF-1.4 hi").unwrap();
        let part = file(&path).unwrap();
        assert_eq!(
            part,
            ContentPart::File {
                source: MediaSource::Base64 {
                    media_type: "application/pdf".into(),
                    data: "JVBERi0xLjQgaGk=".into(),
                },
                filename: Some("tiny.pdf".into()),
            }
        );
    }

    #[test]
    fn the_size_bound_holds_before_and_while_reading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.png");
        std::fs::write(&path, vec![0u8; 101]).unwrap();
        match read_bounded(&path, 100) {
            Err(AttachmentError::TooLarge { size, limit, .. }) => {
                assert_eq!((size, limit), (101, 100))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(read_bounded(&path, 101).map(|b| b.len()).ok(), Some(101));
    }

    #[test]
    fn a_prompts_attachments_share_one_bound() {
        let dir = tempfile::tempdir().unwrap();
        let six = (6 * 1024 * 1024) as u64;
        let (a, b) = (dir.path().join("a.pdf"), dir.path().join("b.png"));
        for p in [&a, &b] {
            std::fs::File::create(p).unwrap().set_len(six).unwrap();
        }
        let prompt = Prompt::new("two").file(&a).unwrap();
        assert_eq!(prompt.attached_bytes(), six);
        match prompt.clone().image(&b) {
            Err(AttachmentError::TooLarge { size, limit, .. }) => {
                assert_eq!((size, limit), (six, MAX_ATTACHMENT_BYTES - six))
            }
            other => panic!("{other:?}"),
        }
        // Alone, the same image fits.
        assert!(Prompt::new("one").image(&b).is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn links_are_followed_and_fifos_and_missing_files_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t.gif");
        std::fs::write(&target, b"GIF89a").unwrap();
        let link = dir.path().join("l.gif");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(image(&link).is_ok());
        let fifo = dir.path().join("p.png");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert!(matches!(
            image(&fifo),
            Err(AttachmentError::NotAFile { .. })
        ));
        let missing = dir.path().join("missing.png");
        assert!(matches!(
            image(&missing),
            Err(AttachmentError::Unreadable { .. })
        ));
        assert!(matches!(
            image(dir.path()),
            Err(AttachmentError::UnknownType { .. })
        ));
    }
}
