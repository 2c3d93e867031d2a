//! The annotated function, as the macro sees it: its parameters (name or
//! pattern, type, docs, `#[haip(...)]` options, field attributes) and its
//! return type. The model keeps the original syntax so every error points at
//! the user's token.
//!
//! It does not say which parameters are data and which are injected, nor
//! whether the return type is a `Result`: type names prove nothing (a user's
//! `State<T>` or `Result` is an ordinary type, an alias of `Result` has any
//! name), so the generated code asks the type system (`ToolArg`, `Returns`).

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{Expr, FnArg, Ident, ItemFn, Pat, ReturnType, Type};

use crate::doc::{self, DocPiece};
use crate::errors::Errors;
use crate::keys::{Keys, key_of, skip_value};

pub(crate) struct ToolFn {
    /// The user's function, with parameter attributes (docs, `#[haip(...)]`) removed.
    pub(crate) func: ItemFn,
    pub(crate) docs: Vec<DocPiece>,
    /// `self`, `&self`, ...: rejected by the checks.
    pub(crate) receiver: Option<Span>,
    /// The typed parameters, in order.
    pub(crate) params: Vec<Param>,
    pub(crate) output: Output,
    /// Each `.await` of a plain `fn`'s body (not in an `async` block or
    /// closure of its own): the `await` keyword. Rejected by the checks.
    pub(crate) awaits: Vec<Span>,
}

pub(crate) struct Param {
    /// The identifier, when the pattern is a plain one.
    pub(crate) ident: Option<Ident>,
    pub(crate) pat: Pat,
    pub(crate) ty: Type,
    pub(crate) docs: Vec<DocPiece>,
    /// `#[haip(default = ...)]`: the value and the attribute.
    pub(crate) default: Option<(Expr, syn::Attribute)>,
    /// `#[serde(...)]`, `#[schemars(...)]` and `#[validate(...)]`: moved onto
    /// the generated field, where their derives read them.
    pub(crate) field_attrs: Vec<syn::Attribute>,
}

/// Parameter attributes that belong to the generated args field.
const FIELD_ATTRS: [&str; 3] = ["serde", "schemars", "validate"];

#[allow(clippy::large_enum_variant)]
pub(crate) enum Output {
    /// No return type, or `()`: no result, no output schema.
    Unit,
    /// Any other type, `Result<T, E>` (under any name) included.
    Returns(Type),
}

impl ToolFn {
    pub(crate) fn parse(mut func: ItemFn, errors: &mut Errors) -> ToolFn {
        let docs = doc::collect(&func.attrs);
        let mut receiver = None;
        let mut params = Vec::new();
        for arg in func.sig.inputs.iter_mut() {
            let pt = match arg {
                FnArg::Receiver(r) => {
                    receiver = Some(r.span());
                    continue;
                }
                FnArg::Typed(pt) => pt,
            };
            let docs = doc::collect(&pt.attrs);
            let default = parse_param_attrs(&pt.attrs, errors);
            let field_attrs = pt
                .attrs
                .iter()
                .filter(|a| FIELD_ATTRS.iter().any(|name| a.path().is_ident(name)))
                .cloned()
                .collect();
            // These attributes are ours; rustc rejects doc comments on parameters.
            pt.attrs.retain(|a| {
                !a.path().is_ident("doc")
                    && !a.path().is_ident("haip")
                    && !FIELD_ATTRS.iter().any(|name| a.path().is_ident(name))
            });
            let ident = match &*pt.pat {
                Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => Some(p.ident.clone()),
                _ => None,
            };
            params.push(Param {
                ident,
                pat: (*pt.pat).clone(),
                ty: (*pt.ty).clone(),
                docs,
                default,
                field_attrs,
            });
        }
        let output = match &func.sig.output {
            ReturnType::Type(_, ty) if !is_unit(ty) => Output::Returns((**ty).clone()),
            _ => Output::Unit,
        };
        let awaits = if func.sig.asyncness.is_none() {
            let mut finder = Awaits::default();
            finder.visit_block_mut(&mut (*func.block).clone());
            finder.found
        } else {
            Vec::new()
        };
        ToolFn {
            func,
            docs,
            receiver,
            params,
            output,
            awaits,
        }
    }

    /// The function as emitted when it has errors: a plain `fn` whose body
    /// `.await`s has each one replaced by `unreachable!()` (its operand still
    /// evaluated and typed), so the only error about it is the macro's.
    pub(crate) fn emitted(&self) -> ItemFn {
        let mut func = self.func.clone();
        if !self.awaits.is_empty() {
            let mut replace = Awaits {
                replace: true,
                ..Awaits::default()
            };
            replace.visit_block_mut(&mut func.block);
            func.attrs.push(
                syn::parse_quote!(#[allow(unreachable_code, unused_variables, unused_assignments)]),
            );
        }
        func
    }

    pub(crate) fn name(&self) -> &Ident {
        &self.func.sig.ident
    }
}

impl Param {
    /// The parameter's field in the generated args struct: its name (a
    /// property name, for data), or a stand-in for a pattern (valid only for
    /// injected parameters and `Params<T>`).
    pub(crate) fn field(&self, index: usize) -> Ident {
        match &self.ident {
            Some(ident) => ident.clone(),
            None => quote::format_ident!("__haip_arg_{}", index),
        }
    }

    /// The field's name as serde sees it (without `r#`).
    pub(crate) fn field_name(&self, index: usize) -> String {
        self.field(index)
            .to_string()
            .trim_start_matches("r#")
            .to_owned()
    }
}

/// Finds (and, with `replace`, neutralises) the `.await`s that belong to the
/// function itself: not those of `async` blocks and closures inside it, nor
/// of items defined in it.
#[derive(Default)]
struct Awaits {
    found: Vec<Span>,
    replace: bool,
}

impl VisitMut for Awaits {
    fn visit_expr_mut(&mut self, expr: &mut Expr) {
        match expr {
            Expr::Async(_) => {}
            Expr::Closure(c) if c.asyncness.is_some() => {}
            Expr::Await(a) => {
                self.found.push(a.await_token.span());
                self.visit_expr_mut(&mut a.base);
                if self.replace {
                    let base = &a.base;
                    let span = a.await_token.span();
                    *expr = syn::parse_quote_spanned! {span=>
                        { let _ = #base; ::core::unreachable!() }
                    };
                }
            }
            _ => syn::visit_mut::visit_expr_mut(self, expr),
        }
    }

    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}

/// `()`, the only return type known without the type system: written out, it
/// cannot be anything else.
fn is_unit(ty: &Type) -> bool {
    match ty {
        Type::Tuple(t) => t.elems.is_empty(),
        Type::Paren(p) => is_unit(&p.elem),
        _ => false,
    }
}

/// `#[haip(default = <expr>)]`, or `#[haip(default)]` for
/// `Default::default()`; every other key is an error.
fn parse_param_attrs(
    attrs: &[syn::Attribute],
    errors: &mut Errors,
) -> Option<(Expr, syn::Attribute)> {
    let mut default = None;
    let mut seen = Keys::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("haip")) {
        let result = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("default") {
                let expr: Expr = if meta.input.peek(syn::Token![=]) {
                    meta.value()?.parse()?
                } else {
                    let span = meta.path.span();
                    syn::parse_quote_spanned!(span=> ::core::default::Default::default())
                };
                match seen.again("default", &meta.path) {
                    Some(twice) => errors.push(twice),
                    None => default = Some((expr, attr.clone())),
                }
                Ok(())
            } else {
                let key = key_of(&meta.path);
                errors.push(syn::Error::new_spanned(
                    &meta.path,
                    unknown_param_option(&key),
                ));
                skip_value(&meta)
            }
        });
        if let Err(e) = result {
            errors.push(e);
        }
    }
    default
}

/// What to write instead of `#[haip(key ...)]` on a parameter.
fn unknown_param_option(key: &str) -> String {
    let instead = match key {
        "description" | "desc" | "doc" => {
            "describe a parameter with a doc comment (`/// ...`) above it".to_owned()
        }
        "rename" | "name" => {
            "give its property another name with `#[serde(rename = \"...\")]`".to_owned()
        }
        "optional" | "required" => {
            "an `Option<T>` parameter, or one with `#[haip(default = ...)]`, is optional".to_owned()
        }
        _ if crate::errors::did_you_mean(key, &["default"], &[]).is_some() => {
            "did you mean `default`?".to_owned()
        }
        _ => "a parameter takes `#[haip(default = <expression>)]` or `#[haip(default)]`".to_owned(),
    };
    format!("unknown parameter option `{key}`: {instead}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::ToTokens;
    use syn::parse_quote;

    fn parse(f: ItemFn) -> (ToolFn, Vec<String>) {
        let mut errors = Errors::default();
        let model = ToolFn::parse(f, &mut errors);
        (model, errors.messages())
    }

    fn tokens(t: &impl ToTokens) -> String {
        t.to_token_stream().to_string()
    }

    #[test]
    fn parameters_keep_their_syntax_and_options() {
        let (m, errors) = parse(parse_quote! {
            async fn t(
                /// First.
                a: f64,
                #[haip(default = 3)] b: u32,
                ctx: haip::Context,
                db: State<Db>,
                #[schemars(length(min = 1))] c: Option<String>,
            ) -> Result<Out, haip::ToolError> { todo!() }
        });
        assert!(errors.is_empty(), "{errors:?}");
        assert!(m.receiver.is_none());
        let names: Vec<String> = m.params.iter().map(|p| tokens(&p.ident)).collect();
        assert_eq!(names, ["a", "b", "ctx", "db", "c"]);
        let types: Vec<String> = m.params.iter().map(|p| tokens(&p.ty)).collect();
        assert_eq!(
            types,
            [
                "f64",
                "u32",
                "haip :: Context",
                "State < Db >",
                "Option < String >"
            ]
        );
        assert_eq!(
            doc::description(&m.params[0].docs).unwrap().to_string(),
            "\"First.\""
        );
        assert_eq!(tokens(&m.params[1].default.as_ref().unwrap().0), "3");
        assert!(m.params.iter().take(4).all(|p| p.field_attrs.is_empty()));
        assert_eq!(
            tokens(&m.params[4].field_attrs[0]),
            "# [schemars (length (min = 1))]"
        );
        // Type names mean nothing to the model: the return type is just a type.
        assert!(
            matches!(&m.output, Output::Returns(ty) if tokens(ty) == "Result < Out , haip :: ToolError >")
        );
        // Parameter attributes are stripped from the emitted function.
        let emitted = tokens(&m.func);
        assert!(!emitted.contains("haip (default"), "{emitted}");
        assert!(!emitted.contains("schemars"), "{emitted}");
        assert!(!emitted.contains("First."), "{emitted}");
    }

    #[test]
    fn outputs() {
        let (m, _) = parse(parse_quote! { fn t() {} });
        assert!(matches!(m.output, Output::Unit));
        let (m, _) = parse(parse_quote! { fn t() -> () {} });
        assert!(matches!(m.output, Output::Unit));
        for ty in [
            quote::quote!(std::io::Result<u8>),
            quote::quote!(Res<u8>),
            quote::quote!(Result),
            quote::quote!(Vec<u8>),
        ] {
            let (m, _) = parse(parse_quote! { fn t() -> #ty { todo!() } });
            assert!(
                matches!(&m.output, Output::Returns(t) if tokens(t) == ty.to_string()),
                "{ty}"
            );
        }
    }

    #[test]
    fn patterns_receivers_and_field_names() {
        let (m, _) = parse(
            parse_quote! { async fn t(&self, Params(q): Params<Query>, r#type: u8, (a, b): (u8, u8)) {} },
        );
        assert!(m.receiver.is_some());
        assert_eq!(m.params.len(), 3);
        assert!(m.params[0].ident.is_none());
        assert_eq!(m.params[0].field(0).to_string(), "__haip_arg_0");
        assert_eq!(m.params[1].field(1).to_string(), "r#type");
        assert_eq!(m.params[1].field_name(1), "type");
        assert!(m.params[2].ident.is_none());
    }

    #[test]
    fn awaits_of_a_plain_fn_are_found_and_neutralised() {
        let (m, _) = parse(parse_quote! {
            fn t() -> u8 {
                let a = f().await;
                let b = async { g().await };
                let c = async || h().await;
                fn inner() { let _ = i(); }
                a + j(k().await)
            }
        });
        assert_eq!(m.awaits.len(), 2);
        let emitted = tokens(&m.emitted());
        assert!(!emitted.contains("f () . await"), "{emitted}");
        assert!(
            emitted.contains("{ let _ = f () ; :: core :: unreachable ! () }"),
            "{emitted}"
        );
        assert!(
            emitted.contains("g () . await"),
            "async blocks keep theirs: {emitted}"
        );
        assert!(emitted.contains("h () . await"), "{emitted}");
        assert!(
            emitted.contains("# [allow (unreachable_code , unused_variables"),
            "{emitted}"
        );
        let (m, _) = parse(parse_quote! { async fn t() { f().await } });
        assert!(m.awaits.is_empty());
        assert_eq!(tokens(&m.emitted()), tokens(&m.func));
    }

    #[test]
    fn unknown_param_options_are_errors() {
        let (_, errors) = parse(parse_quote! { fn t(#[haip(defualt = 1)] a: u8) {} });
        assert_eq!(
            errors,
            ["unknown parameter option `defualt`: did you mean `default`?"]
        );
        let (m, errors) = parse(parse_quote! {
            fn t(#[haip(description = "x", rename = "b")] a: u8, #[haip(default)] b: u8) {}
        });
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("doc comment (`/// ...`)"), "{errors:?}");
        assert!(
            errors[1].contains("`#[serde(rename = \"...\")]`"),
            "{errors:?}"
        );
        assert_eq!(
            tokens(&m.params[1].default.as_ref().unwrap().0),
            ":: core :: default :: Default :: default ()"
        );
        let (_, errors) = parse(parse_quote! { fn t(#[haip(default = 1, default = 2)] a: u8) {} });
        assert_eq!(errors, ["`default` set more than once"]);
    }
}
