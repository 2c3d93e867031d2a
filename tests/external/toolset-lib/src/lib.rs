//! Text tools, written once and served by whichever server mounts them:
//! `haip::Server::builder().mount("text", toolset_lib::tools())`.

use haip::{Context, ToolError, haip_tool};

/// How a text was changed.
#[haip::data]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    /// The new text.
    pub text: String,
    /// How many characters it has.
    pub chars: usize,
}

/// Upper-case a text.
#[haip_tool(read_only, idempotent)]
pub async fn shout(
    /// The text, 1 to 100 characters.
    #[schemars(length(min = 1, max = 100))]
    text: String,
) -> Changed {
    let text = text.to_uppercase();
    Changed {
        chars: text.chars().count(),
        text,
    }
}

/// Count the words of a text, line by line, reporting progress.
#[haip_tool]
pub async fn count_words(
    /// The text.
    text: String,
    ctx: Context,
) -> Result<usize, ToolError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut words = 0;
    for (i, line) in lines.iter().enumerate() {
        if ctx.is_cancelled() {
            return Err(ToolError::cancelled());
        }
        words += line.split_whitespace().count();
        ctx.progress((i + 1) as f64 * 100.0 / lines.len() as f64);
        yield_now().await;
    }
    ctx.info(format!("{words} words in {} lines", lines.len()));
    Ok(words)
}

/// Replace a text, once the person confirms.
#[haip_tool(destructive)]
pub async fn replace(
    /// The text to replace.
    old: String,
    /// What replaces it.
    new: String,
    ctx: Context,
) -> Result<Changed, ToolError> {
    if !ctx
        .confirm(format!("Replace {old:?} with {new:?}?"))
        .await?
    {
        return Err(ToolError::new("DECLINED", "the person kept the old text"));
    }
    Ok(Changed {
        chars: new.chars().count(),
        text: new,
    })
}

/// Lets other tasks run between lines (without naming a runtime).
async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await;
}

/// Every tool of the crate, as a set a server mounts under a prefix.
pub fn tools() -> haip::ToolSet {
    haip::ToolSet::annotated(module_path!()).expect("the crate's tools build")
}
