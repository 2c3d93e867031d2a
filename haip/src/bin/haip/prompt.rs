//! A tool's question put to a person in the terminal, one prompt per field.
//!
//! [`Form`] does no I/O: it says what to print and takes the lines typed,
//! so `haip call` can keep reading the call's events (and Ctrl-C) between
//! two lines. The rules, also in `haip call --help`:
//!
//! * the required fields are asked first, in the order the tool's struct
//!   declares them (the schema's `required`), then the optional ones;
//! * each prompt shows the field's name, type, choices (numbered: type the
//!   number, the value or its title) and default;
//! * empty input takes the default, when there is one; on a required field
//!   without a default it declines the question; on an optional field it
//!   leaves the field out;
//! * an answer left with no value at all (every field empty) declines;
//! * a question with no fields asks yes or no: `y` accepts, anything else
//!   empty or `n` declines;
//! * the end of the input (stdin closed) declines.
//!
//! Before a tool that declares itself destructive is called, [`confirm_prompt`]
//! asks whether to call it; only `y` or `yes` ([`confirmed`]) does.

use haip::Violation;
use haip::client::{Field, FieldKind, Question, Response, SchemaError};
use serde_json::{Map, Value};

/// A question being asked, field by field.
pub(crate) struct Form {
    request_id: String,
    message: String,
    fields: Vec<Field>,
    /// The field being asked.
    at: usize,
    content: Map<String, Value>,
}

/// What to do after a line.
#[derive(Debug, PartialEq)]
pub(crate) enum Step {
    /// Ask the next field ([`Form::ask`]).
    Next,
    /// The line was not a valid value: print why, then the same prompt
    /// ([`Form::prompt`]).
    Again(String),
    /// The form is filled in (or declined): send this.
    Done(Response),
}

impl Form {
    /// The form of a question; `Err` when its schema cannot be shown.
    pub(crate) fn new(question: &Question) -> Result<Form, SchemaError> {
        Ok(Form {
            request_id: question.request_id.clone(),
            message: question.message.clone(),
            fields: in_declared_order(question.fields()?, &question.schema),
            at: 0,
            content: Map::new(),
        })
    }

    /// The question's id, for the reply.
    pub(crate) fn request_id(&self) -> &str {
        &self.request_id
    }

    /// What to print before the first prompt.
    pub(crate) fn intro(&self) -> String {
        let message = if self.message.is_empty() {
            "The tool asks:"
        } else {
            &self.message
        };
        if self.fields.is_empty() {
            format!("? {message}")
        } else {
            format!("? {message}\n  (Enter on a required field without a default declines)")
        }
    }

    /// What to print to ask the current field: its description, if any, on
    /// a line of its own, then [`Form::prompt`].
    pub(crate) fn ask(&self) -> String {
        match self
            .fields
            .get(self.at)
            .and_then(|f| f.description.as_ref())
        {
            Some(description) => format!("  # {description}\n{}", self.prompt()),
            None => self.prompt(),
        }
    }

    /// The prompt for the current field, without a line break (what is
    /// printed again after a bad value).
    pub(crate) fn prompt(&self) -> String {
        let Some(field) = self.fields.get(self.at) else {
            return "  accept? [y/N]: ".to_owned();
        };
        let mut prompt = String::from("  ");
        prompt.push_str(&field.name);
        if let Some(title) = field.title.as_ref().filter(|t| **t != field.name) {
            prompt.push_str(&format!(" \"{title}\""));
        }
        let mut details = kind_text(&field.kind);
        match (field.default_text(), &field.kind) {
            (Some(_), FieldKind::Boolean) => {
                let yes = field.default == Some(Value::Bool(true));
                details.push_str(if yes { "; default yes" } else { "; default no" });
            }
            (Some(default), _) => details.push_str(&format!("; default {default}")),
            (None, _) if field.required => details.push_str("; required"),
            (None, _) => details.push_str("; optional"),
        }
        prompt.push_str(&format!(" ({details}): "));
        prompt
    }

    /// Takes one typed line (`None`: the input ended).
    pub(crate) fn feed(&mut self, line: Option<&str>) -> Step {
        let Some(line) = line else {
            return Step::Done(Response::Decline);
        };
        let line = line.trim_end_matches(['\r', '\n']);
        let Some(field) = self.fields.get(self.at) else {
            // No fields: yes or no.
            return match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => Step::Done(Response::Accept(Value::Object(Map::new()))),
                "" | "n" | "no" => Step::Done(Response::Decline),
                _ => Step::Again("answer y or n".to_owned()),
            };
        };
        if line.trim().is_empty() {
            match &field.default {
                Some(default) => {
                    self.content.insert(field.name.clone(), default.clone());
                }
                None if field.required => return Step::Done(Response::Decline),
                None => {}
            }
        } else {
            match field.parse(line) {
                Ok(value) => {
                    self.content.insert(field.name.clone(), value);
                }
                Err(e) => return Step::Again(e.0),
            }
        }
        self.at += 1;
        if self.at < self.fields.len() {
            Step::Next
        } else if self.content.is_empty() {
            Step::Done(Response::Decline)
        } else {
            Step::Done(Response::Accept(Value::Object(std::mem::take(
                &mut self.content,
            ))))
        }
    }

    /// Starts over, after the server refused the answer.
    pub(crate) fn restart(&mut self) {
        self.at = 0;
        self.content.clear();
    }
}

/// The fields in the order to ask them: the required ones as the schema's
/// `required` lists them (a `#[haip::data]` struct's declaration order),
/// then the optional ones as its `properties` do. A JSON object's keys come
/// sorted by name, so `required` is the only order the wire keeps.
fn in_declared_order(mut fields: Vec<Field>, schema: &Value) -> Vec<Field> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // A stable sort: optional fields keep their order, after the others.
    fields.sort_by_key(|field| {
        required
            .iter()
            .position(|name| *name == field.name)
            .unwrap_or(usize::MAX)
    });
    fields
}

/// The type part of a prompt: `integer, 1 to 12`, `choose one: 1) a, 2) b`.
fn kind_text(kind: &FieldKind) -> String {
    let range = |min: &Option<f64>, max: &Option<f64>| match (min, max) {
        (Some(min), Some(max)) => format!(", {min} to {max}"),
        (Some(min), None) => format!(", at least {min}"),
        (None, Some(max)) => format!(", at most {max}"),
        (None, None) => String::new(),
    };
    let numbered = |choices: &[haip::client::Choice]| {
        choices
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{}) {}", i + 1, c.label()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match kind {
        FieldKind::Text {
            min_length,
            max_length,
            format,
            ..
        } => {
            let mut text = match format {
                Some(format) => format!("text, {format}"),
                None => "text".to_owned(),
            };
            match (min_length, max_length) {
                (Some(min), Some(max)) => text.push_str(&format!(", {min} to {max} characters")),
                (Some(min), None) => text.push_str(&format!(", at least {min} characters")),
                (None, Some(max)) => text.push_str(&format!(", at most {max} characters")),
                (None, None) => {}
            }
            text
        }
        FieldKind::Integer { minimum, maximum } => format!("integer{}", range(minimum, maximum)),
        FieldKind::Number { minimum, maximum } => format!("number{}", range(minimum, maximum)),
        FieldKind::Boolean => "y/n".to_owned(),
        FieldKind::Choice(choices) => format!("choose one: {}", numbered(choices)),
        FieldKind::MultiChoice { choices, .. } => {
            format!("choose any, separated by commas: {}", numbered(choices))
        }
        other => other.name().to_owned(),
    }
}

/// The question asked before calling a tool that declares itself
/// destructive, `shown` by its title (else its name); no line break.
pub(crate) fn confirm_prompt(shown: &str) -> String {
    format!("This tool is destructive: {shown}. Call it? [y/N] ")
}

/// Whether the line typed at [`confirm_prompt`] says yes (`y` or `yes`, in
/// any case); anything else, and the end of the input, is no.
pub(crate) fn confirmed(line: Option<&str>) -> bool {
    line.is_some_and(|line| matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes"))
}

/// The server's reasons for refusing an answer, one per line.
pub(crate) fn violations_text(message: &str, violations: &[Violation]) -> String {
    let mut text = format!("  the answer was not accepted: {message}");
    for violation in violations {
        text.push_str(&format!("\n    {violation}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn booking() -> Form {
        Form::new(&Question {
            request_id: "q-1".into(),
            message: "How many people, and when?".into(),
            schema: json!({"type": "object", "properties": {
                "party_size": {"type": "integer", "minimum": 1, "maximum": 12},
                "time": {"type": "string", "enum": ["18:00", "19:00", "20:00"]}
            }, "required": ["party_size", "time"]}),
        })
        .unwrap()
    }

    #[test]
    fn one_prompt_per_field_with_type_choices_and_default() {
        let mut form = booking();
        assert_eq!(form.request_id(), "q-1");
        assert!(form.intro().starts_with("? How many people, and when?\n"));
        assert_eq!(form.prompt(), "  party_size (integer, 1 to 12; required): ");
        assert_eq!(form.ask(), form.prompt(), "no description");
        assert_eq!(
            form.feed(Some("13")),
            Step::Again("must be at most 12".into())
        );
        assert_eq!(form.feed(Some("4\r\n")), Step::Next);
        assert_eq!(
            form.prompt(),
            "  time (choose one: 1) 18:00, 2) 19:00, 3) 20:00; required): "
        );
        assert_eq!(
            form.feed(Some("2")),
            Step::Done(Response::Accept(json!({"party_size": 4, "time": "19:00"})))
        );
        // Asked again after the server refused: from the first field.
        form.restart();
        assert_eq!(form.feed(Some("12")), Step::Next);
        assert_eq!(
            form.feed(Some("20:00")),
            Step::Done(Response::Accept(json!({"party_size": 12, "time": "20:00"})))
        );
    }

    #[test]
    fn empty_input_declines_or_takes_the_default() {
        // Empty on the first field, required, no default: declined.
        assert_eq!(booking().feed(Some("")), Step::Done(Response::Decline));
        // Empty on a later required field: declined too.
        let mut form = booking();
        assert_eq!(form.feed(Some("3")), Step::Next);
        assert_eq!(form.feed(Some("  ")), Step::Done(Response::Decline));
        // The input ended: declined.
        assert_eq!(booking().feed(None), Step::Done(Response::Decline));
        let mut form = Form::new(&Question {
            request_id: "q".into(),
            message: String::new(),
            schema: json!({"properties": {
                "confirm": {"type": "boolean", "title": "Confirm", "default": true, "description": "Really?"},
                "note": {"type": "string"}
            }, "required": ["confirm"]}),
        })
        .unwrap();
        assert_eq!(form.intro().lines().next(), Some("? The tool asks:"));
        assert_eq!(
            form.ask(),
            "  # Really?\n  confirm \"Confirm\" (y/n; default yes): "
        );
        assert_eq!(form.prompt(), "  confirm \"Confirm\" (y/n; default yes): ");
        assert_eq!(form.feed(Some("")), Step::Next, "the default");
        assert_eq!(form.prompt(), "  note (text; optional): ");
        assert_eq!(
            form.feed(Some("")),
            Step::Done(Response::Accept(json!({"confirm": true}))),
            "optional fields left empty are left out"
        );
        // Only optional fields, all left empty: nothing typed at all declines.
        let mut form = Form::new(&Question {
            request_id: "q".into(),
            message: "m".into(),
            schema: json!({"properties": {"note": {"type": "string", "maxLength": 5}}}),
        })
        .unwrap();
        assert_eq!(
            form.prompt(),
            "  note (text, at most 5 characters; optional): "
        );
        assert_eq!(form.feed(Some("")), Step::Done(Response::Decline));
    }

    #[test]
    fn required_fields_are_asked_in_declared_order_then_optional_ones() {
        // `properties` come sorted by name; `required` keeps the struct's order.
        let form = Form::new(&Question {
            request_id: "q".into(),
            message: "m".into(),
            schema: json!({"properties": {
                "arrival": {"type": "string"},
                "destination": {"type": "string"},
                "nights": {"type": "integer"},
                "note": {"type": "string"},
                "budget": {"type": "number"}
            }, "required": ["destination", "nights", "arrival"]}),
        })
        .unwrap();
        let names: Vec<&str> = form.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            ["destination", "nights", "arrival", "budget", "note"]
        );
    }

    #[test]
    fn the_confirm_form_defaults_to_no() {
        // What `ctx.confirm` sends.
        let mut form = Form::new(&Question {
            request_id: "q".into(),
            message: "Delete a.txt?".into(),
            schema: json!({"type": "object",
                "properties": {"confirm": {"type": "boolean", "title": "Confirm", "default": false}},
                "required": ["confirm"]}),
        })
        .unwrap();
        assert_eq!(form.prompt(), "  confirm \"Confirm\" (y/n; default no): ");
        assert_eq!(
            form.feed(Some("")),
            Step::Done(Response::Accept(json!({"confirm": false})))
        );
    }

    #[test]
    fn a_question_without_fields_is_yes_or_no() {
        let question = Question {
            request_id: "q".into(),
            message: "Proceed?".into(),
            schema: json!({"type": "object", "properties": {}}),
        };
        let mut form = Form::new(&question).unwrap();
        assert_eq!(form.intro(), "? Proceed?");
        assert_eq!(form.prompt(), "  accept? [y/N]: ");
        assert_eq!(
            form.feed(Some("maybe")),
            Step::Again("answer y or n".into())
        );
        assert_eq!(
            form.feed(Some("Y")),
            Step::Done(Response::Accept(json!({})))
        );
        assert_eq!(
            Form::new(&question).unwrap().feed(Some("")),
            Step::Done(Response::Decline)
        );
    }

    #[test]
    fn destructive_tools_are_called_only_on_yes() {
        assert_eq!(
            confirm_prompt("Delete a repository"),
            "This tool is destructive: Delete a repository. Call it? [y/N] "
        );
        for yes in ["y", "Y\n", " yes\r\n", "YES"] {
            assert!(confirmed(Some(yes)), "{yes:?}");
        }
        for no in ["", "\n", "n", "no", "yep", "sure"] {
            assert!(!confirmed(Some(no)), "{no:?}");
        }
        assert!(!confirmed(None), "the input ended");
    }

    #[test]
    fn prompts_show_every_kind() {
        let form = |property: Value| {
            Form::new(&Question {
                request_id: "q".into(),
                message: "m".into(),
                schema: json!({"properties": {"f": property}}),
            })
            .unwrap()
            .prompt()
        };
        assert_eq!(
            form(json!({"type": "number", "minimum": 0.5})),
            "  f (number, at least 0.5; optional): "
        );
        assert_eq!(
            form(json!({"type": "string", "format": "email", "minLength": 3, "maxLength": 9})),
            "  f (text, email, 3 to 9 characters; optional): "
        );
        assert_eq!(
            form(json!({"type": "array", "default": ["r", "g"],
                "items": {"anyOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}]}})),
            "  f (choose any, separated by commas: 1) Red (r), 2) Green (g); default r, g): "
        );
        assert_eq!(
            form(json!({"type": "boolean", "default": false})),
            "  f (y/n; default no): "
        );
        assert!(
            Form::new(&Question {
                request_id: "q".into(),
                message: "m".into(),
                schema: json!({"properties": {"f": {"type": "object"}}}),
            })
            .is_err()
        );
        let text = violations_text(
            "Answer does not match",
            &[Violation {
                path: "/party_size".into(),
                message: "13 is greater than 12".into(),
            }],
        );
        assert_eq!(
            text,
            "  the answer was not accepted: Answer does not match\n    /party_size: 13 is greater than 12"
        );
    }
}
