//! The rules of `#[haip_tool]` functions, in two kinds:
//!
//! - **syntactic** ([`check`]): the tool's name (MCP's rule), generics,
//!   receivers, qualifiers, `impl Trait` parameters. Every violation is
//!   collected, so one build reports all of them.
//! - **by role** ([`role_checks`]): whether a parameter is data, injected
//!   (`Context`, `State<T>`) or the whole params (`Params<T>`) is decided by
//!   its type's `ToolArg` implementation, which only the compiler knows. These
//!   rules become compile-time assertions (`const _: () = ...`) at the user's
//!   token, evaluated by rustc.

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{GenericParam, Path, Type};

use crate::attr::Options;
use crate::errors::Errors;
use crate::model::{Param, ToolFn};

/// The longest tool name MCP allows, in characters.
const MAX_NAME_CHARS: usize = 128;

/// How many of a name's offending characters a message lists.
const SHOWN_CHARS: usize = 3;

/// Checks the function and its options against the syntactic rules of
/// `#[haip_tool]`.
pub(crate) fn check(model: &ToolFn, options: &Options, errors: &mut Errors) {
    let name = options.tool_name(model.name());
    if let Some(message) = invalid_name(&name.value) {
        errors.push(syn::Error::new(name.span, message));
    }
    if let Some(error) = contradicting_hints(options) {
        errors.push(error);
    }
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
    if let Some(span) = model.receiver {
        errors.push(syn::Error::new(
            span,
            "#[haip_tool] cannot take `self`: use a free function, and `haip::State<T>` for shared state",
        ));
    }
    if let Some(&span) = model.awaits.first() {
        let name = model.name();
        errors.push(syn::Error::new(
            span,
            format!("a plain `fn` cannot `.await`: make the tool `async` (`async fn {name}(...)`)"),
        ));
    }
    for param in &model.params {
        if let Type::ImplTrait(t) = &param.ty {
            errors.push(syn::Error::new_spanned(
                t,
                "`impl Trait` parameters make the function generic; name a concrete type",
            ));
        }
    }
}

/// `read_only` with `destructive`: a tool that modifies nothing destroys
/// nothing (MCP: `destructiveHint` is meaningful only when `readOnlyHint` is
/// false). Reported at whichever of the two comes later, as a repeated
/// option is.
fn contradicting_hints(options: &Options) -> Option<syn::Error> {
    let hints = &options.hints;
    let (read_only, destructive) = (hints.read_only.as_ref()?, hints.destructive.as_ref()?);
    if !(read_only.value && destructive.value) {
        return None;
    }
    let (later, earlier, at) = if destructive.position > read_only.position {
        ("destructive", "read_only", destructive.span)
    } else {
        ("read_only", "destructive", read_only.span)
    };
    Some(syn::Error::new(
        at,
        format!(
            "`{later}` contradicts `{earlier}`: a read-only tool does not modify its environment, \
             so it cannot be destructive (MCP's destructiveHint is meaningful only when \
             readOnlyHint is false); remove one of them"
        ),
    ))
}

/// What is wrong with a tool name under MCP's rule (1 to 128 characters, each
/// `A-Z a-z 0-9 _ - .`), or `None` when it is valid. A function's name can
/// break it too: by its length, or by non-ASCII letters (`fn café`).
fn invalid_name(name: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    let length = name.chars().count();
    let mut offending: Vec<char> = Vec::new();
    for c in name.chars().filter(|&c| !allowed(c)) {
        if !offending.contains(&c) {
            offending.push(c);
        }
    }
    let found = if length == 0 {
        "an empty name".to_owned()
    } else if length > MAX_NAME_CHARS && offending.is_empty() {
        format!("{length} characters")
    } else if length > MAX_NAME_CHARS {
        format!("{length} characters, including {}", list(&offending))
    } else if !offending.is_empty() {
        list(&offending)
    } else {
        return None;
    };
    // A long name is shortened: the source line shows it whole.
    let mut shown: String = name.chars().take(32).map(show).collect();
    if length > 32 {
        shown.push('…');
    }
    let shown = if name.is_empty() {
        String::new()
    } else {
        format!(" `{shown}`")
    };
    Some(format!(
        "invalid tool name{shown}: a tool name is 1 to {MAX_NAME_CHARS} characters, \
         each an ASCII letter, digit, `_`, `-` or `.` (MCP's rule); found {found}"
    ))
}

/// "`a`", "`a` and `b`", "`a`, `b` and `c`", "`a`, `b`, `c` and 2 more".
fn list(chars: &[char]) -> String {
    let quoted: Vec<String> = chars
        .iter()
        .take(SHOWN_CHARS)
        .map(|&c| format!("`{}`", show(c)))
        .collect();
    match (chars.len().saturating_sub(SHOWN_CHARS), quoted.as_slice()) {
        (0, [one]) => one.clone(),
        (0, [init @ .., last]) => format!("{} and {last}", init.join(", ")),
        (more, _) => format!("{} and {more} more", quoted.join(", ")),
    }
}

/// A character as a message shows it: control characters escaped (`\t`).
fn show(c: char) -> String {
    if c.is_control() {
        c.escape_debug().to_string()
    } else {
        c.to_string()
    }
}

/// The rules that depend on what each parameter is, as compile-time
/// assertions: the role of each parameter (`ToolArg::ROLE`) is an associated
/// const of the generated type (`__HAIP_ROLE_<i>`, all of them in
/// `__HAIP_ROLES`), and each rule is a `const _` that panics, at the offending
/// token, when it is broken.
///
/// Parameters whose type cannot be named outside the function (a generic
/// parameter, `impl Trait`, `Self`) are left out, so these checks can run
/// beside the syntactic errors too. Nothing is emitted for a method (there is
/// no type to hold the roles).
pub(crate) fn role_checks(model: &ToolFn, krate: &Path) -> TokenStream {
    if model.receiver.is_some() {
        return TokenStream::new();
    }
    let private = quote!(#krate::__private);
    let generics: Vec<String> = model
        .func
        .sig
        .generics
        .params
        .iter()
        .map(|g| match g {
            GenericParam::Type(t) => t.ident.to_string(),
            GenericParam::Lifetime(l) => l.lifetime.ident.to_string(),
            GenericParam::Const(c) => c.ident.to_string(),
        })
        .collect();
    let closed: Vec<(usize, &Param)> = model
        .params
        .iter()
        .enumerate()
        .filter(|(_, p)| is_closed(p.ty.to_token_stream(), &generics))
        .collect();
    let name = model.name();
    let count = closed.len();
    let role_consts = closed.iter().map(|(i, p)| {
        let ty = &p.ty;
        let role = role_const(*i);
        quote_spanned!(ty.span()=> const #role: #private::ArgRole = <#ty as #private::ToolArg>::ROLE;)
    });
    let roles = closed.iter().map(|(i, _)| role_const(*i));
    let mut out = quote! {
        #[allow(dead_code, clippy::all, clippy::pedantic)]
        impl #name {
            #(#role_consts)*
            const __HAIP_ROLES: [#private::ArgRole; #count] = [#(Self::#roles),*];
        }
    };
    let roles = quote!(&#name::__HAIP_ROLES);
    for (i, (_, param)) in closed.iter().enumerate() {
        if param.ident.is_none() {
            let panic = spanned_panic(
                &param.pat,
                "use a plain identifier here: a tool parameter's name is its property name in the input schema",
            );
            out.extend(quote! {
                const _: () = if #private::is_data(#roles, #i) { #panic };
            });
        }
        let ty = &param.ty;
        let second_context = spanned_panic(
            ty,
            "a tool takes at most one `Context`; clone it where you need it twice",
        );
        let second_params = spanned_panic(ty, "a tool takes at most one `Params<T>`");
        let beside_data = spanned_panic(
            ty,
            "`Params<T>` must be the only parameter taken from params: move the other parameters into `T`",
        );
        out.extend(quote! {
            const _: () = if #private::second_context(#roles, #i) {
                #second_context
            } else if #private::second_params(#roles, #i) {
                #second_params
            } else if #private::params_beside_data(#roles, #i) {
                #beside_data
            };
        });
        if let Some((_, attr)) = &param.default {
            let panic = spanned_panic(
                attr,
                "`#[haip(default = ...)]` applies only to parameters taken from params",
            );
            out.extend(quote! {
                const _: () = if !#private::is_data(#roles, #i) { #panic };
            });
        }
        for attr in &param.field_attrs {
            let panic = spanned_panic(
                attr,
                "serde and schemars attributes apply only to parameters taken from params; put them on the fields of `T` in `Params<T>`",
            );
            out.extend(quote! {
                const _: () = if !#private::is_data(#roles, #i) { #panic };
            });
        }
    }
    out
}

/// `__HAIP_ROLE_<index>`: the role of parameter `index`, the one place a
/// parameter type is asked to be a `ToolArg` (so a bad type is one error, at
/// that type). Generated code reaches the type through
/// `Checked<{ <fn>::__HAIP_ROLE_<index> as u8 }, T>`.
pub(crate) fn role_const(index: usize) -> syn::Ident {
    quote::format_ident!("__HAIP_ROLE_{}", index)
}

/// Whether a type can be named outside the function: no `impl Trait`, no
/// `Self` and none of the function's generic parameters (types, lifetimes,
/// consts) appear in it.
fn is_closed(tokens: TokenStream, generics: &[String]) -> bool {
    tokens.into_iter().all(|token| match token {
        TokenTree::Ident(ident) => {
            let ident = ident.to_string();
            ident != "impl" && ident != "Self" && !generics.contains(&ident)
        }
        TokenTree::Group(group) => is_closed(group.stream(), generics),
        _ => true,
    })
}

/// `::core::panic!(message)`, spanning the tokens of `at` (first to last), so
/// the compile-time error underlines them.
fn spanned_panic(at: &dyn ToTokens, message: &str) -> TokenStream {
    let tokens = at.to_token_stream();
    let start = tokens
        .clone()
        .into_iter()
        .next()
        .map_or_else(Span::call_site, |t| t.span());
    let end = tokens.into_iter().last().map_or(start, |t| t.span());
    let mut args = Group::new(Delimiter::Parenthesis, quote_spanned!(end=> #message));
    args.set_span(end);
    let mut out = quote_spanned!(start=> ::core::panic!);
    out.extend([TokenTree::Group(args)]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn messages(f: syn::ItemFn) -> Vec<String> {
        messages_with(f, TokenStream::new())
    }

    fn messages_with(f: syn::ItemFn, options: TokenStream) -> Vec<String> {
        let mut errors = Errors::default();
        let options = Options::parse(options, &mut errors);
        let model = ToolFn::parse(f, &mut errors);
        check(&model, &options, &mut errors);
        errors.messages()
    }

    const RULE: &str = "a tool name is 1 to 128 characters, each an ASCII letter, digit, \
                        `_`, `-` or `.` (MCP's rule)";

    #[test]
    fn names_follow_mcps_rule() {
        for good in ["add", "files.read-v2_beta", "X", "0", "-", &"n".repeat(128)] {
            assert_eq!(invalid_name(good), None, "{good}");
        }
        let expect = |found: &str| format!("{RULE}; found {found}");
        assert_eq!(
            invalid_name("bad name!").unwrap(),
            format!("invalid tool name `bad name!`: {}", expect("` ` and `!`"))
        );
        assert_eq!(
            invalid_name("").unwrap(),
            format!("invalid tool name: {}", expect("an empty name"))
        );
        assert_eq!(
            invalid_name("café").unwrap(),
            format!("invalid tool name `café`: {}", expect("`é`"))
        );
        // Deduplicated, at most three listed, control characters escaped.
        assert_eq!(
            invalid_name("a/b/c d\te:f").unwrap(),
            format!(
                "invalid tool name `a/b/c d\\te:f`: {}",
                expect("`/`, ` `, `\\t` and 1 more")
            )
        );
        // Too long: the length, and any offending characters.
        let long = "n".repeat(129);
        assert_eq!(
            invalid_name(&long).unwrap(),
            format!(
                "invalid tool name `{}…`: {}",
                "n".repeat(32),
                expect("129 characters")
            )
        );
        let long = format!("{} x", "n".repeat(128));
        assert!(
            invalid_name(&long)
                .unwrap()
                .ends_with("; found 130 characters, including ` `")
        );
    }

    #[test]
    fn the_name_is_checked_from_the_option_or_the_function() {
        let m = messages_with(
            parse_quote! { async fn ok() {} },
            quote!(name = "bad name!"),
        );
        assert_eq!(m.len(), 1, "{m:#?}");
        assert!(m[0].starts_with("invalid tool name `bad name!`"), "{m:#?}");
        // A valid option hides an invalid function name, and the reverse.
        let long = quote::format_ident!("{}", "f".repeat(129));
        assert!(messages_with(parse_quote! { fn #long() {} }, quote!(name = "ok")).is_empty());
        let m = messages(parse_quote! { fn #long() {} });
        assert_eq!(m.len(), 1, "{m:#?}");
        assert!(m[0].ends_with("found 129 characters"), "{m:#?}");
        let m = messages(parse_quote! { fn café() {} });
        assert_eq!(m.len(), 1, "{m:#?}");
        assert!(m[0].ends_with("found `é`"), "{m:#?}");
        // `r#` is not part of the name.
        assert!(messages(parse_quote! { fn r#type() {} }).is_empty());
    }

    #[test]
    fn read_only_and_destructive_contradict_at_the_later_one() {
        let m = messages_with(parse_quote! { fn f() {} }, quote!(read_only, destructive));
        assert_eq!(m.len(), 1, "{m:#?}");
        assert!(
            m[0].starts_with("`destructive` contradicts `read_only`: a read-only tool"),
            "{m:#?}"
        );
        assert!(m[0].contains("meaningful only when readOnlyHint is false"));
        let m = messages_with(
            parse_quote! { fn f() {} },
            quote!(destructive = true, title = "t", read_only = true),
        );
        assert_eq!(m.len(), 1, "{m:#?}");
        assert!(
            m[0].starts_with("`read_only` contradicts `destructive`"),
            "{m:#?}"
        );
        // Any other combination says something coherent.
        for ok in [
            quote!(read_only, destructive = false),
            quote!(read_only = false, destructive),
            quote!(read_only, idempotent, open_world = false),
            quote!(destructive, idempotent),
        ] {
            let m = messages_with(parse_quote! { fn f() {} }, ok.clone());
            assert!(m.is_empty(), "{ok}: {m:#?}");
        }
    }

    #[test]
    fn a_bad_name_is_reported_with_the_other_mistakes() {
        let mut errors = Errors::default();
        let options = Options::parse(quote!(name = "", timeout = "soon"), &mut errors);
        let model = ToolFn::parse(parse_quote! { fn f<T>(&self) {} }, &mut errors);
        check(&model, &options, &mut errors);
        let m = errors.messages();
        assert_eq!(m.len(), 4, "{m:#?}");
        assert!(m[0].starts_with("invalid timeout"));
        assert!(m[1].ends_with("found an empty name"));
        assert!(m[2].contains("cannot be generic"));
        assert!(m[3].contains("cannot take `self`"));
    }

    fn role_checks_of(f: syn::ItemFn) -> String {
        let mut errors = Errors::default();
        let model = ToolFn::parse(f, &mut errors);
        role_checks(&model, &parse_quote!(::haip)).to_string()
    }

    #[test]
    fn a_plain_fn_that_awaits_is_told_to_be_async() {
        let m = messages(parse_quote! { fn find(id: u64) -> u8 { look(id).await; more().await } });
        assert_eq!(
            m,
            ["a plain `fn` cannot `.await`: make the tool `async` (`async fn find(...)`)"]
        );
        assert!(messages(parse_quote! { async fn find() { look().await } }).is_empty());
    }

    #[test]
    fn accepted_forms_have_no_syntactic_errors() {
        assert!(messages(parse_quote! { async fn ok(a: u8, ctx: Context) -> u8 { a } }).is_empty());
        assert!(messages(parse_quote! { fn ok(Params(p): Params<P>, s: State<S>) {} }).is_empty());
        // Decided by the types' roles, at compile time, not here.
        assert!(
            messages(parse_quote! { fn ok((a, b): (u8, u8), c1: Context, c2: Context) {} })
                .is_empty()
        );
        assert!(messages(parse_quote! { fn ok(a: u8, Params(p): Params<P>) {} }).is_empty());
    }

    #[test]
    fn every_syntactic_mistake_is_reported_at_once() {
        let m = messages(parse_quote! {
            async fn bad<T>(&self, a: impl Into<String>) where T: Copy {}
        });
        assert_eq!(m.len(), 4, "{m:#?}");
        assert!(m[0].contains("cannot be generic"));
        assert!(m[1].contains("`where` clause"));
        assert!(m[2].contains("cannot take `self`"));
        assert!(m[3].contains("`impl Trait`"));
        let m = messages(parse_quote! { const unsafe extern "C" fn f(a: u8) {} });
        assert_eq!(m.len(), 3, "{m:#?}");
        assert!(m[0].contains("`const`"));
        assert!(m[1].contains("`unsafe`"));
        assert!(m[2].contains("`extern`"));
    }

    #[test]
    fn role_rules_become_assertions_at_the_users_tokens() {
        let out = role_checks_of(parse_quote! {
            async fn f((a, b): (u8, u8), #[haip(default = 1)] #[serde(rename = "x")] c: Context) {}
        });
        for needle in [
            "const __HAIP_ROLE_0 : :: haip :: __private :: ArgRole = < (u8 , u8) as :: haip :: __private :: ToolArg > :: ROLE ;",
            "const __HAIP_ROLE_1 : :: haip :: __private :: ArgRole = < Context as :: haip :: __private :: ToolArg > :: ROLE ;",
            "const __HAIP_ROLES : [:: haip :: __private :: ArgRole ; 2usize] = [Self :: __HAIP_ROLE_0 , Self :: __HAIP_ROLE_1]",
        ] {
            assert!(out.contains(needle), "{needle}: {out}");
        }
        for needle in [
            "is_data (& f :: __HAIP_ROLES , 0usize)",
            "use a plain identifier here",
            "second_context (& f :: __HAIP_ROLES , 1usize)",
            "at most one `Params<T>`",
            "must be the only parameter taken from params",
            "applies only to parameters taken from params\"",
            "serde and schemars attributes apply only",
        ] {
            assert!(out.contains(needle), "{needle}: {out}");
        }
    }

    #[test]
    fn open_types_and_methods_get_no_role_checks() {
        let out = role_checks_of(parse_quote! {
            fn f<'a, T, const N: usize>(a: T, b: &'a str, c: [u8; N], d: impl Copy, e: Vec<Self>, g: u8) {}
        });
        assert!(
            out.contains("[:: haip :: __private :: ArgRole ; 1usize] = [Self :: __HAIP_ROLE_5]"),
            "{out}"
        );
        assert!(
            out.contains("const __HAIP_ROLE_5 : :: haip :: __private :: ArgRole = < u8 as"),
            "{out}"
        );
        assert!(role_checks_of(parse_quote! { fn f(&self, a: u8) {} }).is_empty());
    }
}
