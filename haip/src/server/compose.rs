//! Composing tools: [`ToolSet`] (the tools a library crate exports),
//! [`Mount`] (a set served under a name prefix, edited on the way), and how
//! [`ServerBuilder::build`](super::ServerBuilder::build) puts together every
//! tool it was given, once, before the server starts.

use crate::Error;
use crate::tool::{TagFilter, Tool, ToolEdit, builtin, validate_name};

/// A set of tools, in order: what a library crate of tools exports for
/// applications to [`mount`](crate::ServerBuilder::mount) under a prefix of
/// their choosing, or to add as they are
/// ([`tools`](crate::ServerBuilder::tools)).
///
/// ```
/// use haip::{ToolSet, haip_tool};
///
/// /// Read a file.
/// #[haip_tool(tags = ["read"])]
/// async fn read(path: String) -> String {
///     format!("contents of {path}")
/// }
///
/// /// Write a file.
/// #[haip_tool(tags = ["write"])]
/// async fn write(path: String, text: String) -> usize {
///     text.len() + path.len()
/// }
///
/// /// What a crate of file tools exports.
/// pub fn file_tools() -> ToolSet {
///     ToolSet::new().tool(read::tool()).tool(write::tool())
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), haip::Error> {
/// let handle = haip::Server::builder()
///     .addr("127.0.0.1:0")
///     .mount("files", file_tools())
///     .exclude_tags(["write"])
///     .build()?
///     .start()
///     .await?;
/// let names: Vec<String> = handle.tools().iter().map(|t| t.name().to_owned()).collect();
/// assert_eq!(names, ["files_read"]);
/// # handle.shutdown().await;
/// # Ok(()) }
/// ```
///
/// A crate can also export every `#[haip_tool]` it defines, without listing
/// them: [`ToolSet::annotated`]`(module_path!())`.
#[derive(Debug, Clone, Default)]
pub struct ToolSet {
    tools: Vec<Tool>,
}

impl ToolSet {
    /// An empty set.
    pub fn new() -> ToolSet {
        ToolSet::default()
    }

    /// Adds a tool at the end. Names are checked where the set is served:
    /// two tools with one name make [`build`](crate::ServerBuilder::build)
    /// fail, naming both.
    #[must_use]
    pub fn tool(mut self, tool: Tool) -> ToolSet {
        self.tools.push(tool);
        self
    }

    /// Every `#[haip_tool]` function of the module `module` and of the
    /// modules inside it, ordered by source file and line: in a library,
    /// `ToolSet::annotated(module_path!())` at its root collects the whole
    /// crate. Fails when one of them cannot be built (see `try_tool()`).
    ///
    /// ```
    /// mod files {
    ///     /// Read a file.
    ///     #[haip::haip_tool]
    ///     async fn read(path: String) -> String {
    ///         path
    ///     }
    ///
    ///     pub fn tools() -> Result<haip::ToolSet, haip::Error> {
    ///         haip::ToolSet::annotated(module_path!())
    ///     }
    /// }
    ///
    /// /// Not in `files`.
    /// #[haip::haip_tool]
    /// async fn ping() {}
    ///
    /// # fn main() -> Result<(), haip::Error> {
    /// let set = files::tools()?;
    /// assert_eq!(set.iter().map(|t| t.name()).collect::<Vec<_>>(), ["read"]);
    /// # Ok(()) }
    /// ```
    ///
    /// Tools mounted from such a set are not also served under their own
    /// names by [`annotated_tools`](crate::ServerBuilder::annotated_tools).
    pub fn annotated(module: &str) -> Result<ToolSet, Error> {
        let tools = crate::__private::annotated_under(module)?;
        Ok(tools.into_iter().map(|(tool, _)| tool).collect())
    }

    /// The tool named `name`, if the set has one (the first, if several).
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name() == name)
    }

    /// Its tools, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Tool> {
        self.tools.iter()
    }

    /// How many tools it has.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

impl FromIterator<Tool> for ToolSet {
    fn from_iter<I: IntoIterator<Item = Tool>>(tools: I) -> ToolSet {
        ToolSet {
            tools: tools.into_iter().collect(),
        }
    }
}

impl Extend<Tool> for ToolSet {
    fn extend<I: IntoIterator<Item = Tool>>(&mut self, tools: I) {
        self.tools.extend(tools);
    }
}

impl IntoIterator for ToolSet {
    type Item = Tool;
    type IntoIter = std::vec::IntoIter<Tool>;

    fn into_iter(self) -> Self::IntoIter {
        self.tools.into_iter()
    }
}

impl<'a> IntoIterator for &'a ToolSet {
    type Item = &'a Tool;
    type IntoIter = std::slice::Iter<'a, Tool>;

    fn into_iter(self) -> Self::IntoIter {
        self.tools.iter()
    }
}

/// Tools served under a name prefix: each as `<prefix><separator><name>`
/// (`files_read`), edited on the way if asked. Given to
/// [`ServerBuilder::mount_with`](crate::ServerBuilder::mount_with);
/// [`ServerBuilder::mount`](crate::ServerBuilder::mount) is the short form.
///
/// Everything is done once, when the server is built: a mounted tool is an
/// ordinary tool with another name, and its calls cost what they would
/// unmounted. Mistakes (a prefix or separator a tool name cannot hold, a
/// name over 128 characters once prefixed, an edit of a tool the mount does
/// not have) make [`build`](crate::ServerBuilder::build) fail, naming the
/// mount.
///
/// ```
/// use haip::{Mount, Tool};
/// use serde_json::json;
///
/// fn echo() -> Tool {
///     Tool::builder("echo")
///         .description("Echo the text")
///         .input_schema(json!({"type": "object", "properties": {"text": {"type": "string"}}}))
///         .handler(|params: serde_json::Value, _ctx| async move { Ok(params["text"].clone()) })
///         .build()
///         .unwrap()
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), haip::Error> {
/// let handle = haip::Server::builder()
///     .addr("127.0.0.1:0")
///     .mount_with(
///         Mount::new("v2", [echo()])
///             .separator('.')
///             .edit("echo", |e| e.name("say").param_description("text", "What to say")),
///     )
///     .build()?
///     .start()
///     .await?;
/// let tools = handle.tools();
/// assert_eq!(tools[0].name(), "v2.say");
/// assert_eq!(tools[0].input_schema()["properties"]["text"]["description"], "What to say");
/// # handle.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a Mount does nothing until given to ServerBuilder::mount_with"]
pub struct Mount {
    prefix: String,
    separator: Option<char>,
    tools: Vec<Tool>,
    /// The first edit that failed, reported by `build`.
    error: Option<Error>,
}

impl Mount {
    /// `tools` (a [`ToolSet`], a `Vec<Tool>`, an array) under `prefix`.
    pub fn new(prefix: impl Into<String>, tools: impl IntoIterator<Item = Tool>) -> Mount {
        Mount {
            prefix: prefix.into(),
            separator: None,
            tools: tools.into_iter().collect(),
            error: None,
        }
    }

    /// What joins the prefix to each name (default: the builder's
    /// [`mount_separator`](crate::ServerBuilder::mount_separator), `_`).
    pub fn separator(mut self, separator: char) -> Mount {
        self.separator = Some(separator);
        self
    }

    /// Edits the tool named `tool` (its own name, before the prefix) with
    /// `edit` ([`ToolEdit`]: rename it, describe it and its parameters anew,
    /// tag it, rename or fix parameters). A new name is prefixed too.
    pub fn edit(mut self, tool: &str, edit: impl FnOnce(ToolEdit) -> ToolEdit) -> Mount {
        if self.error.is_some() {
            return self;
        }
        match self.tools.iter().position(|t| t.name() == tool) {
            Some(i) => match edit(self.tools[i].edit()).build() {
                Ok(edited) => self.tools[i] = edited,
                Err(e) => self.error = Some(e),
            },
            None => {
                let names: Vec<&str> = self.tools.iter().map(Tool::name).collect();
                self.error = Some(Error::InvalidConfig {
                    setting: "mount",
                    reason: format!(
                        "mount `{}` has no tool `{tool}` to edit; its tools: {}",
                        self.prefix,
                        if names.is_empty() {
                            "none".to_owned()
                        } else {
                            names.join(", ")
                        }
                    ),
                });
            }
        }
        self
    }

    /// The mounted tools, each with where it came from (for name clashes).
    fn resolve(self, default_separator: char) -> Result<Vec<(Tool, String)>, Error> {
        let invalid = |setting, reason| Error::InvalidConfig { setting, reason };
        if let Some(error) = self.error {
            return Err(match error {
                Error::InvalidConfig { .. } => error,
                other => invalid("mount", format!("mount `{}`: {other}", self.prefix)),
            });
        }
        let separator = self.separator.unwrap_or(default_separator);
        if validate_name(&separator.to_string()).is_err() {
            return Err(invalid(
                "mount_separator",
                format!(
                    "{separator:?} cannot join a prefix to a tool name: tool names hold only \
                     A-Z, a-z, 0-9, `_`, `.` and `-` (MCP's rule), and `_` is the one every \
                     MCP host accepts"
                ),
            ));
        }
        if validate_name(&self.prefix).is_err() {
            return Err(invalid(
                "mount",
                format!(
                    "prefix {:?} is not the start of a tool name: 1 to 126 characters from \
                     A-Z, a-z, 0-9, `_`, `.` and `-`",
                    self.prefix
                ),
            ));
        }
        self.tools
            .into_iter()
            .map(|tool| {
                let name = format!("{}{separator}{}", self.prefix, tool.name());
                if validate_name(&name).is_err() {
                    return Err(invalid(
                        "mount",
                        format!(
                            "mount `{}`: `{name}` is {} characters long; a tool name has at \
                             most 128",
                            self.prefix,
                            name.len()
                        ),
                    ));
                }
                let origin = format!(
                    "`{}` mounted under `{}`{}",
                    tool.name(),
                    self.prefix,
                    defined_at(&tool)
                );
                Ok((tool.edit().name(name).build()?, origin))
            })
            .collect()
    }
}

/// ` (#[haip_tool] at src/files.rs:12)` for a tool built by the macro.
fn defined_at(tool: &Tool) -> String {
    tool.definition()
        .map(|d| format!(" (#[haip_tool] at {}:{})", d.file, d.line))
        .unwrap_or_default()
}

/// Everything a builder was given that becomes tools.
pub(super) struct Given {
    pub(super) builtins: bool,
    pub(super) annotated: bool,
    /// Tools given with `.tool()`, each with where it came from.
    pub(super) tools: Vec<(Tool, String)>,
    /// Mounts, each with the number of `.tool()`s given before it.
    pub(super) mounts: Vec<(usize, Mount)>,
    pub(super) separator: Option<char>,
    pub(super) filter: TagFilter,
}

impl Given {
    /// The tools to serve, in registry order (built-ins, annotated tools,
    /// then the tools and mounts in the order given), each with where it
    /// came from; tag filters applied. Annotated tools leave out every
    /// `#[haip_tool]` function also given explicitly (with `.tool()` or
    /// mounted): a tool is served where it was placed, not again under its
    /// own name because it is linked into the binary.
    pub(super) fn tools(self) -> Result<Vec<(Tool, String)>, Error> {
        if let Some((setting, tag)) = self.filter.invalid() {
            return Err(Error::InvalidConfig {
                setting,
                reason: format!(
                    "{tag:?} is not a tag: {} (no tool can have it)",
                    crate::tool::TAG_RULE
                ),
            });
        }
        let separator = self.separator.unwrap_or('_');
        let mut explicit = Vec::with_capacity(self.tools.len());
        let mut mounts = self.mounts.into_iter().peekable();
        for (i, given) in self.tools.into_iter().enumerate() {
            while let Some((_, mount)) = mounts.next_if(|(at, _)| *at <= i) {
                explicit.extend(mount.resolve(separator)?);
            }
            explicit.push(given);
        }
        for (_, mount) in mounts {
            explicit.extend(mount.resolve(separator)?);
        }
        let mut tools: Vec<(Tool, String)> = Vec::new();
        if self.builtins {
            tools.extend(builtin::tools().into_iter().map(|t| {
                let origin = format!("built-in `{}`", t.name());
                (t, origin)
            }));
        }
        if self.annotated {
            let given: Vec<&'static crate::tool::Definition> = explicit
                .iter()
                .filter_map(|(t, _)| t.definition())
                .collect();
            tools.extend(
                crate::__private::annotated_tools()?
                    .into_iter()
                    .filter(|(t, _)| {
                        !t.definition()
                            .is_some_and(|d| given.iter().any(|g| std::ptr::eq(*g, d)))
                    }),
            );
        }
        tools.extend(explicit);
        if self.filter.is_empty() {
            return Ok(tools);
        }
        for tag in self.filter.only.iter().chain(&self.filter.exclude) {
            if !tools.iter().any(|(t, _)| t.tags().contains(tag)) {
                tracing::warn!(tag = %tag, "a tag filter names a tag no tool has");
            }
        }
        tools.retain(|(t, _)| self.filter.admits(t));
        Ok(tools)
    }
}

#[cfg(test)]
mod tests;
