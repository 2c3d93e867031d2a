//! Semantic rules for `#[haip_tool]` functions. Every violation is collected,
//! so one build reports all of them.

use crate::errors::Errors;
use crate::model::{ParamKind, ToolFn};

/// Checks the function against the rules of `#[haip_tool]`.
pub(crate) fn check(model: &ToolFn, errors: &mut Errors) {
    let sig = &model.func.sig;
    if !sig.generics.params.is_empty() {
        errors.push(syn::Error::new_spanned(
            &sig.generics,
            "#[haip_tool] functions cannot be generic: the tool's schema is derived from concrete types",
        ));
    }
    if let Some(where_clause) = &sig.generics.where_clause {
        errors.push(syn::Error::new_spanned(
            where_clause,
            "#[haip_tool] functions cannot have a `where` clause: the tool's schema is derived from concrete types",
        ));
    }
    if let Some(constness) = &sig.constness {
        errors.push(syn::Error::new_spanned(
            constness,
            "#[haip_tool] functions cannot be `const`",
        ));
    }
    if let Some(unsafety) = &sig.unsafety {
        errors.push(syn::Error::new_spanned(
            unsafety,
            "#[haip_tool] functions cannot be `unsafe`",
        ));
    }
    if let Some(abi) = &sig.abi {
        errors.push(syn::Error::new_spanned(
            abi,
            "#[haip_tool] functions cannot have an `extern` ABI",
        ));
    }
    if let Some(variadic) = &sig.variadic {
        errors.push(syn::Error::new_spanned(
            variadic,
            "#[haip_tool] functions cannot be variadic",
        ));
    }

    let mut contexts = 0;
    let mut whole_params = 0;
    let args = model.args().count();
    for param in &model.params {
        match &param.kind {
            ParamKind::Receiver(span) => errors.push(syn::Error::new(
                *span,
                "#[haip_tool] cannot take `self`: use a free function, and `haip::State<T>` for shared state",
            )),
            ParamKind::Arg => {
                if param.ident.is_none() {
                    errors.push(syn::Error::new(
                        param.pat_span,
                        "use a plain identifier here: a tool parameter's name is its property name in the input schema",
                    ));
                }
                if let syn::Type::ImplTrait(t) = &param.ty {
                    errors.push(syn::Error::new_spanned(
                        t,
                        "`impl Trait` parameters make the function generic; name a concrete type",
                    ));
                }
            }
            ParamKind::Context => {
                contexts += 1;
                if contexts == 2 {
                    errors.push(syn::Error::new_spanned(
                        &param.ty,
                        "a tool takes at most one `Context`; clone it where you need it twice",
                    ));
                }
            }
            ParamKind::State => {}
            ParamKind::Params(_) => {
                whole_params += 1;
                if whole_params == 2 {
                    errors.push(syn::Error::new_spanned(&param.ty, "a tool takes at most one `Params<T>`"));
                } else if args > 0 {
                    errors.push(syn::Error::new_spanned(
                        &param.ty,
                        "`Params<T>` must be the only parameter taken from params: move the other parameters into `T`",
                    ));
                }
            }
        }
        if let Some((_, span)) = &param.default
            && !matches!(param.kind, ParamKind::Arg)
        {
            errors.push(syn::Error::new(
                *span,
                "`#[haip(default = ...)]` applies only to parameters taken from params",
            ));
        }
        if !matches!(param.kind, ParamKind::Arg) {
            for attr in &param.field_attrs {
                errors.push(syn::Error::new_spanned(
                    attr,
                    "serde and schemars attributes apply only to parameters taken from params; put them on the fields of `T` in `Params<T>`",
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn messages(f: syn::ItemFn) -> Vec<String> {
        let mut errors = Errors::default();
        let model = ToolFn::parse(f, &mut errors);
        check(&model, &mut errors);
        errors.messages()
    }

    #[test]
    fn accepted_forms_have_no_errors() {
        assert!(messages(parse_quote! { async fn ok(a: u8, ctx: Context) -> u8 { a } }).is_empty());
        assert!(messages(parse_quote! { fn ok(Params(p): Params<P>, s: State<S>) {} }).is_empty());
    }

    #[test]
    fn every_mistake_is_reported_at_once() {
        let m = messages(parse_quote! {
            async fn bad<T>(&self, (a, b): (u8, u8), c1: Context, c2: Context, #[haip(default = 1)] c3: State<X>) where T: Copy {}
        });
        assert_eq!(m.len(), 6, "{m:#?}");
        assert!(m[0].contains("cannot be generic"));
        assert!(m[1].contains("`where` clause"));
        assert!(m[2].contains("cannot take `self`"));
        assert!(m[3].contains("plain identifier"));
        assert!(m[4].contains("at most one `Context`"));
        assert!(m[5].contains("applies only to parameters taken from params"));
    }

    #[test]
    fn qualifiers_impl_trait_and_misplaced_attributes_are_rejected() {
        let m = messages(parse_quote! { const unsafe extern "C" fn f(a: impl Into<String>) {} });
        assert_eq!(m.len(), 4, "{m:#?}");
        assert!(m[0].contains("`const`"));
        assert!(m[1].contains("`unsafe`"));
        assert!(m[2].contains("`extern`"));
        assert!(m[3].contains("`impl Trait`"));
        let m = messages(parse_quote! { async fn f(#[schemars(length(min = 1))] ctx: Context) {} });
        assert_eq!(m.len(), 1, "{m:#?}");
        assert!(m[0].contains("only to parameters taken from params"));
    }

    #[test]
    fn params_must_stand_alone() {
        let m = messages(parse_quote! { fn f(a: u8, Params(p): Params<P>) {} });
        assert_eq!(m.len(), 1);
        assert!(m[0].contains("must be the only parameter"));
    }
}
