//! [`ToolEdit`]: a tool made from another one, renamed, described anew,
//! tagged, its parameters described, renamed or fixed. All of it is done once,
//! when the edit is built; a call of the edited tool runs the same handler,
//! and only a tool whose parameters were renamed or fixed pays anything per
//! call (see [`ToolEdit::rename_param`]).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{Tool, ToolFuture, ToolHandler, ToolInner, tags, validate_name};
use crate::Context;
use crate::schema::{CompiledSchema, Profiles};

/// Changes to a [`Tool`], made into a new tool by [`build`](ToolEdit::build);
/// start one with [`Tool::edit`]. The original is left as it was.
///
/// What clients are shown changes; what runs does not: the edited tool calls
/// the same handler, with the same timeout, scopes, state and hints.
/// [`Mount::edit`](crate::Mount::edit) edits tools as they are mounted.
///
/// ```
/// use haip::Tool;
/// use serde_json::json;
///
/// let read = Tool::builder("read")
///     .description("Read a file")
///     .input_schema(json!({
///         "type": "object",
///         "properties": {"path": {"type": "string"}},
///         "required": ["path"]
///     }))
///     .handler(|params: serde_json::Value, _ctx| async move { Ok(params["path"].clone()) })
///     .build()?;
/// let cat = read
///     .edit()
///     .name("cat")
///     .description("Print a file of the project")
///     .param_description("path", "Relative to the project's root")
///     .tags(["files"])
///     .build()?;
/// assert_eq!(cat.name(), "cat");
/// assert_eq!(cat.tags(), ["files"]);
/// assert_eq!(
///     cat.input_schema()["properties"]["path"]["description"],
///     "Relative to the project's root"
/// );
/// assert_eq!(read.name(), "read", "the original is unchanged");
/// # Ok::<(), haip::Error>(())
/// ```
#[must_use = "a ToolEdit does nothing until .build() is called"]
#[derive(Debug)]
pub struct ToolEdit {
    tool: Tool,
    name: Option<String>,
    description: Option<String>,
    title: Option<String>,
    tags: Vec<String>,
    params: Vec<ParamEdit>,
}

/// One change to a parameter, in the order asked; each names the parameter
/// as it is called at that point (after the renames before it).
#[derive(Debug)]
enum ParamEdit {
    Describe(String, String),
    Title(String, String),
    Rename(String, String),
    Fix(String, Value),
}

impl Tool {
    /// Starts a [`ToolEdit`]: a new tool made from this one, renamed,
    /// described anew, tagged, or with parameters described, renamed or
    /// fixed.
    pub fn edit(&self) -> ToolEdit {
        ToolEdit {
            tool: self.clone(),
            name: None,
            description: None,
            title: None,
            tags: Vec::new(),
            params: Vec::new(),
        }
    }
}

impl ToolEdit {
    /// A new name (MCP's rule, checked by `build`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// A new description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// A new title ([`ToolBuilder::title`](crate::ToolBuilder::title)); an
    /// empty one removes it.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Tags added to the tool's own ([`ToolBuilder::tags`](crate::ToolBuilder::tags)).
    pub fn tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tags.extend(tags.into_iter().map(Into::into));
        self
    }

    /// A new description of the parameter `param` (a property of the input
    /// schema), in every schema clients are shown.
    pub fn param_description(
        mut self,
        param: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        self.params
            .push(ParamEdit::Describe(param.into(), description.into()));
        self
    }

    /// A new title of the parameter `param`.
    pub fn param_title(mut self, param: impl Into<String>, title: impl Into<String>) -> Self {
        self.params
            .push(ParamEdit::Title(param.into(), title.into()));
        self
    }

    /// Shows the parameter `from` to clients as `to`. Calls name it `to`, and
    /// the handler still gets it as `from`.
    ///
    /// Unlike the other edits, this one costs something per call: before the
    /// handler runs, the params object has the member moved back (one map
    /// removal and insertion per renamed parameter, in a handler wrapped
    /// around the original). Tools that rename nothing are not wrapped. Only
    /// a parameter of a plain object schema can be renamed: `build` refuses
    /// a schema whose top level also names properties elsewhere (`allOf`,
    /// `anyOf`, `oneOf`, `not`, `if`, `dependentRequired`,
    /// `patternProperties`, ...).
    pub fn rename_param(mut self, from: impl Into<String>, to: impl Into<String>) -> Self {
        self.params.push(ParamEdit::Rename(from.into(), to.into()));
        self
    }

    /// Hides the parameter `param` from clients and always calls the tool
    /// with `value` for it (checked against the parameter's schema by
    /// `build`). The parameter leaves the input schema, so a client that
    /// sends it anyway is refused where the schema is closed, and overridden
    /// where it is open. Costs per call what [`rename_param`](Self::rename_param)
    /// does (one insertion, of a copy of `value`); the same schemas are
    /// refused.
    pub fn fix_param(mut self, param: impl Into<String>, value: Value) -> Self {
        self.params.push(ParamEdit::Fix(param.into(), value));
        self
    }

    /// Makes the edited tool, or says why the edit cannot be made (naming
    /// the original tool): a bad name or tag, a parameter the tool does not
    /// have, a fixed value its schema refuses.
    pub fn build(self) -> Result<Tool, crate::Error> {
        let old = &self.tool.inner;
        let invalid = |reason: String| crate::Error::InvalidTool {
            tool: old.name.clone(),
            reason: format!("cannot edit: {reason}"),
        };
        let name = self.name.unwrap_or_else(|| old.name.clone());
        validate_name(&name)?;
        let mut tags = old.tags.clone();
        tags.extend(self.tags);
        let tags = tags::checked(tags).map_err(invalid)?;
        let mut input = old.input_schema.clone();
        let mut reshape = Reshape::default();
        for edit in self.params {
            edit.apply(&mut input, &mut reshape).map_err(invalid)?;
        }
        let compiled =
            CompiledSchema::compile(&input).map_err(|e| invalid(format!("input schema: {e}")))?;
        let output = match &old.output_schema {
            Some(schema) => Some(
                CompiledSchema::compile(schema)
                    .map_err(|e| invalid(format!("output schema: {e}")))?,
            ),
            None => None,
        };
        let handler: Arc<dyn ToolHandler> = if reshape.is_empty() {
            Arc::clone(&old.handler)
        } else {
            Arc::new(Reshaped {
                reshape,
                inner: Arc::clone(&old.handler),
            })
        };
        Ok(Tool {
            inner: Arc::new(ToolInner {
                name,
                description: self.description.unwrap_or_else(|| old.description.clone()),
                title: match self.title {
                    Some(title) => Some(title).filter(|t| !t.is_empty()),
                    None => old.title.clone(),
                },
                annotations: old.annotations.clone(),
                icons: old.icons.clone(),
                task_support: old.task_support,
                scopes: old.scopes.clone(),
                tags,
                profiles: Profiles::of(&input, old.output_schema.as_ref()),
                input_schema: input,
                output_schema: old.output_schema.clone(),
                shape: old.shape,
                input: compiled,
                output,
                timeout: old.timeout,
                handler,
                required_state: old.required_state.clone(),
                marks: old.marks.clone(),
                definition: old.definition,
            }),
        })
    }
}

/// Top-level keywords that name properties outside `properties` and
/// `required`: a schema with one cannot have a parameter renamed or hidden by
/// editing those two.
const NAMES_PROPERTIES: [&str; 13] = [
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "patternProperties",
    "propertyNames",
    "$ref",
];

impl ParamEdit {
    fn apply(self, schema: &mut Value, reshape: &mut Reshape) -> Result<(), String> {
        match self {
            ParamEdit::Describe(param, text) => set(schema, &param, "description", text),
            ParamEdit::Title(param, text) => set(schema, &param, "title", text),
            ParamEdit::Rename(from, to) => {
                plain(schema, "rename")?;
                property(schema, &from)?;
                if to.is_empty() || properties(schema)?.contains_key(&to) {
                    return Err(format!(
                        "cannot rename parameter `{from}` to `{to}`: {}",
                        if to.is_empty() {
                            "the name is empty"
                        } else {
                            "a parameter has that name"
                        }
                    ));
                }
                let props = properties(schema)?;
                let schema_of = props.remove(&from).expect("checked by `property`");
                props.insert(to.clone(), schema_of);
                if let Some(Value::Array(required)) = schema.get_mut("required") {
                    for r in required.iter_mut().filter(|r| **r == *from) {
                        *r = Value::String(to.clone());
                    }
                }
                reshape.rename(from, to);
                Ok(())
            }
            ParamEdit::Fix(param, value) => {
                plain(schema, "fix")?;
                let schema_of = property(schema, &param)?.clone();
                check_fixed(schema, &param, schema_of, &value)?;
                properties(schema)?.remove(&param);
                if let Some(Value::Array(required)) = schema.get_mut("required") {
                    required.retain(|r| *r != *param);
                }
                reshape.fix(param, value);
                Ok(())
            }
        }
    }
}

/// The schema's `properties`.
fn properties(schema: &mut Value) -> Result<&mut Map<String, Value>, String> {
    match schema.get_mut("properties") {
        Some(Value::Object(props)) => Ok(props),
        _ => Err("its input schema has no `properties`".to_owned()),
    }
}

/// The schema of the parameter `param`, or an error listing the parameters.
fn property<'a>(schema: &'a mut Value, param: &str) -> Result<&'a mut Value, String> {
    let props = properties(schema)?;
    if !props.contains_key(param) {
        let known: Vec<&str> = props.keys().map(String::as_str).collect();
        return Err(format!(
            "it has no parameter `{param}`; its parameters: {}",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        ));
    }
    Ok(props.get_mut(param).expect("checked just above"))
}

/// Sets `key` of the parameter's schema to `text`.
fn set(schema: &mut Value, param: &str, key: &str, text: String) -> Result<(), String> {
    match property(schema, param)? {
        Value::Object(p) => {
            p.insert(key.to_owned(), Value::String(text));
            Ok(())
        }
        Value::Bool(true) => {
            let mut p = Map::new();
            p.insert(key.to_owned(), Value::String(text));
            *schema["properties"].get_mut(param).expect("checked") = Value::Object(p);
            Ok(())
        }
        _ => Err(format!("parameter `{param}` has no schema to give a {key}")),
    }
}

/// Refuses a schema whose parameters are named outside `properties` and
/// `required` (an edit of those alone would change what it means).
fn plain(schema: &Value, what: &str) -> Result<(), String> {
    match NAMES_PROPERTIES.iter().find(|k| schema.get(**k).is_some()) {
        Some(keyword) => Err(format!(
            "cannot {what} a parameter: the input schema names parameters in `{keyword}` too"
        )),
        None => Ok(()),
    }
}

/// Checks a fixed value against its parameter's schema (with the root's
/// definitions, which its `$ref`s may point into).
fn check_fixed(root: &Value, param: &str, schema_of: Value, value: &Value) -> Result<(), String> {
    let mut schema = match schema_of {
        Value::Object(map) => map,
        Value::Bool(true) => Map::new(),
        other => Map::from_iter([("allOf".to_owned(), Value::Array(vec![other]))]),
    };
    for defs in ["$defs", "definitions"] {
        if let Some(d) = root.get(defs) {
            schema.entry(defs).or_insert_with(|| d.clone());
        }
    }
    let compiled = CompiledSchema::compile(&Value::Object(schema))
        .map_err(|e| format!("parameter `{param}`: {e}"))?;
    match compiled.violations(value).first() {
        None => Ok(()),
        Some(v) => Err(format!(
            "the value fixed for parameter `{param}` does not fit its schema: {}{}",
            if v.path.is_empty() {
                String::new()
            } else {
                format!("at {}: ", v.path)
            },
            v.message
        )),
    }
}

/// How the params of a tool whose parameters were renamed or fixed go back
/// to the shape its original handler takes.
#[derive(Debug, Default, PartialEq)]
struct Reshape {
    /// (shown name, the handler's name), applied in order.
    renames: Vec<(String, String)>,
    /// (the handler's name, value): inserted after the renames.
    fixed: Vec<(String, Value)>,
}

impl Reshape {
    fn is_empty(&self) -> bool {
        self.renames.is_empty() && self.fixed.is_empty()
    }

    /// Shows `from` as `to`; a parameter renamed twice keeps one entry, and
    /// one renamed back to its own name none.
    fn rename(&mut self, from: String, to: String) {
        match self.renames.iter().position(|(shown, _)| *shown == from) {
            Some(i) if self.renames[i].1 == to => {
                self.renames.remove(i);
            }
            Some(i) => self.renames[i].0 = to,
            None => self.renames.push((to, from)),
        }
    }

    /// Fixes the parameter shown as `param`.
    fn fix(&mut self, param: String, value: Value) {
        let own = match self.renames.iter().position(|(shown, _)| *shown == param) {
            Some(i) => self.renames.remove(i).1,
            None => param,
        };
        self.fixed.push((own, value));
    }

    /// `params` as the original handler takes them.
    fn apply(&self, params: &mut Value) {
        let Value::Object(map) = params else { return };
        for (shown, own) in &self.renames {
            let value = map.remove(shown);
            // A client may not reach the parameter by its hidden name.
            map.remove(own);
            if let Some(value) = value {
                map.insert(own.clone(), value);
            }
        }
        for (own, value) in &self.fixed {
            map.insert(own.clone(), value.clone());
        }
    }
}

/// The handler of an edited tool with a [`Reshape`]: reshapes, then calls
/// the original handler.
struct Reshaped {
    reshape: Reshape,
    inner: Arc<dyn ToolHandler>,
}

impl ToolHandler for Reshaped {
    fn call(&self, mut params: Value, ctx: Context) -> ToolFuture {
        self.reshape.apply(&mut params);
        self.inner.call(params, ctx)
    }
}

#[cfg(test)]
mod tests;
