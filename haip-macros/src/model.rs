//! The annotated function, as the macro sees it: which parameters come from
//! params, which are injected, and what the return type means. The model keeps
//! the original syntax so every error points at the user's token.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Expr, FnArg, GenericArgument, Ident, ItemFn, Pat, PathArguments, ReturnType, Type};

use crate::doc::{self, DocPiece};
use crate::errors::Errors;

pub(crate) struct ToolFn {
    /// The user's function, with parameter attributes (docs, `#[haip(...)]`) removed.
    pub(crate) func: ItemFn,
    pub(crate) docs: Vec<DocPiece>,
    pub(crate) params: Vec<Param>,
    pub(crate) output: Output,
}

pub(crate) struct Param {
    /// The identifier, when the pattern is a plain one.
    pub(crate) ident: Option<Ident>,
    pub(crate) pat_span: Span,
    pub(crate) ty: Type,
    pub(crate) kind: ParamKind,
    pub(crate) docs: Vec<DocPiece>,
    /// `#[haip(default = ...)]`, with the attribute's span.
    pub(crate) default: Option<(Expr, Span)>,
    /// `#[serde(...)]`, `#[schemars(...)]` and `#[validate(...)]`: moved onto
    /// the generated field, where their derives read them.
    pub(crate) field_attrs: Vec<syn::Attribute>,
}

/// Parameter attributes that belong to the generated args field.
const FIELD_ATTRS: [&str; 3] = ["serde", "schemars", "validate"];

// A handful of these exist per macro call; boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(crate) enum ParamKind {
    /// A schema property.
    Arg,
    /// `haip::Context`.
    Context,
    /// `haip::State<T>`.
    State,
    /// `haip::Params<T>`: `T` is the whole params object.
    Params(Type),
    /// `self`, `&self`, ...: rejected by the checks.
    Receiver(Span),
}

#[allow(clippy::large_enum_variant)]
pub(crate) enum Output {
    /// No return type, or `()`.
    Unit,
    /// `T`.
    Value(Type),
    /// `Result<T, E>` (or an alias such as `io::Result<T>`, where `E` is unnamed).
    Fallible { ok: Type, err: Option<Type> },
}

impl ToolFn {
    pub(crate) fn parse(mut func: ItemFn, errors: &mut Errors) -> ToolFn {
        let docs = doc::collect(&func.attrs);
        let mut params = Vec::new();
        for arg in func.sig.inputs.iter_mut() {
            match arg {
                FnArg::Receiver(r) => params.push(Param {
                    ident: None,
                    pat_span: r.span(),
                    ty: (*r.ty).clone(),
                    kind: ParamKind::Receiver(r.span()),
                    docs: Vec::new(),
                    default: None,
                    field_attrs: Vec::new(),
                }),
                FnArg::Typed(pt) => {
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
                        Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
                            Some(p.ident.clone())
                        }
                        _ => None,
                    };
                    params.push(Param {
                        ident,
                        pat_span: pt.pat.span(),
                        ty: (*pt.ty).clone(),
                        kind: classify(&pt.ty),
                        docs,
                        default,
                        field_attrs,
                    });
                }
            }
        }
        let output = match &func.sig.output {
            ReturnType::Default => Output::Unit,
            ReturnType::Type(_, ty) => classify_output(ty),
        };
        ToolFn {
            func,
            docs,
            params,
            output,
        }
    }

    pub(crate) fn name(&self) -> &Ident {
        &self.func.sig.ident
    }

    /// The parameters that become schema properties.
    pub(crate) fn args(&self) -> impl Iterator<Item = &Param> {
        self.params
            .iter()
            .filter(|p| matches!(p.kind, ParamKind::Arg))
    }

    /// The `Params<T>` parameter's `T`, if there is one.
    pub(crate) fn whole_params(&self) -> Option<&Type> {
        self.params.iter().find_map(|p| match &p.kind {
            ParamKind::Params(inner) => Some(inner),
            _ => None,
        })
    }
}

/// `#[haip(default = <expr>)]`; every other key is an error.
fn parse_param_attrs(attrs: &[syn::Attribute], errors: &mut Errors) -> Option<(Expr, Span)> {
    let mut default = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("haip")) {
        let result = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("default") {
                let expr: Expr = meta.value()?.parse()?;
                if default.is_some() {
                    errors.push(syn::Error::new_spanned(
                        &meta.path,
                        "`default` set more than once",
                    ));
                } else {
                    default = Some((expr, attr.span()));
                }
                Ok(())
            } else {
                Err(meta.error("unknown parameter option; expected `default = <expression>`"))
            }
        });
        if let Err(e) = result {
            errors.push(e);
        }
    }
    default
}

fn last_segment(ty: &Type) -> Option<&syn::PathSegment> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        _ => None,
    }
}

fn first_type_arg(segment: &syn::PathSegment) -> Option<&Type> {
    type_args(segment).next()
}

fn type_args(segment: &syn::PathSegment) -> impl Iterator<Item = &Type> {
    let args = match &segment.arguments {
        PathArguments::AngleBracketed(a) => Some(&a.args),
        _ => None,
    };
    args.into_iter().flatten().filter_map(|a| match a {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    })
}

fn classify(ty: &Type) -> ParamKind {
    let Some(segment) = last_segment(ty) else {
        return ParamKind::Arg;
    };
    match segment.ident.to_string().as_str() {
        "Context" if segment.arguments.is_none() => ParamKind::Context,
        "State" if first_type_arg(segment).is_some() => ParamKind::State,
        "Params" => match first_type_arg(segment) {
            Some(inner) => ParamKind::Params(inner.clone()),
            None => ParamKind::Arg,
        },
        _ => ParamKind::Arg,
    }
}

fn classify_output(ty: &Type) -> Output {
    if let Type::Tuple(t) = ty
        && t.elems.is_empty()
    {
        return Output::Unit;
    }
    if let Some(segment) = last_segment(ty)
        && segment.ident == "Result"
    {
        let mut args = type_args(segment);
        if let Some(ok) = args.next() {
            return Output::Fallible {
                ok: ok.clone(),
                err: args.next().cloned(),
            };
        }
    }
    Output::Value(ty.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn parse(f: ItemFn) -> (ToolFn, Vec<String>) {
        let mut errors = Errors::default();
        let model = ToolFn::parse(f, &mut errors);
        (model, errors.messages())
    }

    #[test]
    fn parameters_are_classified() {
        let (m, errors) = parse(parse_quote! {
            async fn t(
                /// First.
                a: f64,
                #[haip(default = 3)] b: u32,
                ctx: haip::Context,
                db: State<Db>,
                c: Option<String>,
            ) -> Result<Out, haip::ToolError> { todo!() }
        });
        assert!(errors.is_empty(), "{errors:?}");
        let kinds: Vec<&str> = m
            .params
            .iter()
            .map(|p| match p.kind {
                ParamKind::Arg => "arg",
                ParamKind::Context => "context",
                ParamKind::State => "state",
                ParamKind::Params(_) => "params",
                ParamKind::Receiver(_) => "self",
            })
            .collect();
        assert_eq!(kinds, ["arg", "arg", "context", "state", "arg"]);
        assert_eq!(m.args().count(), 3);
        assert_eq!(
            doc::description(&m.params[0].docs).unwrap().to_string(),
            "\"First.\""
        );
        assert!(m.params[1].default.is_some());
        assert!(matches!(m.output, Output::Fallible { err: Some(_), .. }));
        // Parameter attributes are stripped from the emitted function.
        let emitted = quote::quote!(#(m.func)).to_string();
        assert!(!emitted.contains("haip (default"), "{emitted}");
    }

    #[test]
    fn outputs_are_classified() {
        let (m, _) = parse(parse_quote! { fn t() {} });
        assert!(matches!(m.output, Output::Unit));
        let (m, _) = parse(parse_quote! { fn t() -> () {} });
        assert!(matches!(m.output, Output::Unit));
        let (m, _) = parse(parse_quote! { fn t() -> std::io::Result<u8> { todo!() } });
        assert!(matches!(m.output, Output::Fallible { err: None, .. }));
        let (m, _) = parse(parse_quote! { fn t() -> Vec<u8> { todo!() } });
        assert!(matches!(m.output, Output::Value(_)));
    }

    #[test]
    fn whole_params_and_patterns() {
        let (m, _) =
            parse(parse_quote! { async fn t(Params(q): Params<Query>, (a, b): (u8, u8)) {} });
        assert!(m.whole_params().is_some());
        assert!(m.params[1].ident.is_none());
    }

    #[test]
    fn unknown_param_options_are_errors() {
        let (_, errors) = parse(parse_quote! { fn t(#[haip(defualt = 1)] a: u8) {} });
        assert_eq!(errors.len(), 1);
        assert!(errors[0].contains("expected `default"), "{errors:?}");
    }
}
