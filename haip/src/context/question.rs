//! Questions a tool puts to its client, as values to await: [`Ask`],
//! [`Confirm`] and [`ListRoots`] (made by [`Context::ask`],
//! [`Context::confirm`] and [`Context::roots`]), each with an optional key.
//!
//! A question's **key** names it among the call's questions. Over MCP
//! without sessions, a call that asks ends its round with the questions it
//! is waiting for, and is run again with the answers (see [`Context::ask`]):
//! an answer finds its question again by key. By default a question's key
//! is its kind and its place among the call's questions (`ask-1`,
//! `sample-2`, ...), which is the same on every run of a tool that asks the
//! same questions in the same order; [`Ask::key`] names one explicitly.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::Context;
use super::talk::{Answer, AskError, Root, RootsError};
use crate::schema::Form;

/// A boxed future borrowing the context.
type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A type a question may ask for: a struct of named fields, the form people
/// fill in ([`Context::ask`]).
///
/// `#[haip::data]` implements it for every struct with named fields; a
/// string, a number, a list, an enum or a tuple struct is not a form, so
/// `ctx.ask::<String>(..)` is a compile error (ask for one value with a
/// struct of one field). A struct that derives `Deserialize` and
/// `JsonSchema` itself, without `#[haip::data]`, says it is a form with
/// an empty impl:
///
/// ```
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Pick {
///     choice: String,
/// }
///
/// impl haip::QuestionForm for Pick {}
///
/// # async fn f(ctx: haip::Context) -> Result<(), haip::ToolError> {
/// let pick = ctx.ask::<Pick>("Pick one").await?;
/// # Ok(()) }
/// ```
///
/// Its fields are still checked when the question is asked: a field of a
/// shape a form cannot hold (a nested struct) is [`AskError::InvalidForm`].
#[diagnostic::on_unimplemented(
    message = "a question's form must be a struct with `#[haip::data]`: `{Self}` is not one",
    label = "not a struct of named fields",
    note = "to ask for one value, put it in a struct of one field: \
            `#[haip::data] struct Reply {{ value: ... }}`; `ctx.confirm(..)` asks yes or no",
    note = "a struct that derives `Deserialize` and `JsonSchema` itself is a form with \
            `impl haip::QuestionForm for MyForm {{}}`"
)]
pub trait QuestionForm {}

/// A question whose answer is a form of type `T`, made by
/// [`Context::ask`]. Await it for the answer.
#[must_use = "a question is asked when it is awaited"]
pub struct Ask<'a, T> {
    ctx: &'a Context,
    message: String,
    key: Option<String>,
    answer: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for Ask<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ask")
            .field("message", &self.message)
            .field("key", &self.key)
            .finish()
    }
}

impl<'a, T> Ask<'a, T> {
    pub(super) fn new(ctx: &'a Context, message: String) -> Ask<'a, T> {
        Ask {
            ctx,
            message,
            key: None,
            answer: PhantomData,
        }
    }

    /// Names the question among the call's questions (default: `ask-<n>`,
    /// by its place): an MCP client sees the key with the question, and an
    /// answer given under it on a later round is this question's.
    ///
    /// ```
    /// # async fn f(ctx: haip::Context) -> Result<(), haip::ToolError> {
    /// #[haip::data]
    /// struct Name {
    ///     name: String,
    /// }
    /// let name = ctx.ask::<Name>("What is your name?").key("user_name").await?;
    /// # Ok(()) }
    /// ```
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
}

// No `QuestionForm` bound here: `Context::ask` has it, and a type without it
// is then one error there, not a second one at `.await`.
impl<'a, T> IntoFuture for Ask<'a, T>
where
    T: schemars::JsonSchema + DeserializeOwned + 'static,
{
    type Output = Result<Answer<T>, AskError>;
    type IntoFuture = Pending<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let ctx = self.ctx;
        let key = self.key.unwrap_or_else(|| ctx.next_key("ask"));
        let message = self.message;
        Box::pin(async move {
            let form = Form::of::<T>().map_err(AskError::InvalidForm)?;
            match ctx.ask_form(key, message, form).await? {
                Answer::Accepted(value) => serde_json::from_value(value)
                    .map(Answer::Accepted)
                    .map_err(|e| AskError::InvalidAnswer(e.to_string())),
                Answer::Declined => Ok(Answer::Declined),
                Answer::Cancelled => Ok(Answer::Cancelled),
            }
        })
    }
}

/// A yes-or-no question, made by [`Context::confirm`]. Await it: `true`
/// only when the person accepts and confirms.
#[derive(Debug)]
#[must_use = "a question is asked when it is awaited"]
pub struct Confirm<'a> {
    ctx: &'a Context,
    message: String,
    key: Option<String>,
}

impl<'a> Confirm<'a> {
    pub(super) fn new(ctx: &'a Context, message: String) -> Confirm<'a> {
        Confirm {
            ctx,
            message,
            key: None,
        }
    }

    /// Names the question (default: `confirm-<n>`); see [`Ask::key`].
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
}

impl<'a> IntoFuture for Confirm<'a> {
    type Output = Result<bool, AskError>;
    type IntoFuture = Pending<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let ctx = self.ctx;
        let key = self.key.unwrap_or_else(|| ctx.next_key("confirm"));
        let message = self.message;
        Box::pin(async move {
            match ctx.ask_form(key, message, Form::confirm()).await? {
                Answer::Accepted(value) => {
                    Ok(value.get("confirm").and_then(Value::as_bool) == Some(true))
                }
                Answer::Declined | Answer::Cancelled => Ok(false),
            }
        })
    }
}

/// A request for the client's roots, made by [`Context::roots`]. Await it.
#[derive(Debug)]
#[must_use = "the roots are asked for when this is awaited"]
pub struct ListRoots<'a> {
    ctx: &'a Context,
    key: Option<String>,
}

impl<'a> ListRoots<'a> {
    pub(super) fn new(ctx: &'a Context) -> ListRoots<'a> {
        ListRoots { ctx, key: None }
    }

    /// Names the request (default: `roots-<n>`); see [`Ask::key`].
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
}

impl<'a> IntoFuture for ListRoots<'a> {
    type Output = Result<Vec<Root>, RootsError>;
    type IntoFuture = Pending<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let ctx = self.ctx;
        let key = self.key.unwrap_or_else(|| ctx.next_key("roots"));
        Box::pin(async move { ctx.list_roots(key).await })
    }
}
