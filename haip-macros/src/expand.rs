//! Code generation for a checked `#[haip_tool]` function.
//!
//! Nothing here depends on how a type is spelled. Each parameter's type says
//! what it is through `ToolArg` (data, `Context`, `State<T>`, `Params<T>`) and
//! the return type is probed for `Result<T, E>` through `Returns`, all at
//! compile time or once when the tool is built, never per call.

use proc_macro2::{TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::LitStr;
use syn::spanned::Spanned;

use crate::attr::{self, Options};
use crate::check;
use crate::doc;
use crate::hints::{Hints, IconOption, TaskSupport, Theme};
use crate::model::{Output, ToolFn};

pub(crate) fn expand(model: &ToolFn, options: &Options) -> TokenStream {
    let krate = options.crate_path();
    let (serde_path, schemars_path) = attr::derive_crates(&krate);
    let private = quote!(#krate::__private);

    let func = &model.func;
    let vis = &func.vis;
    let fn_name = model.name();
    let tool_name = options.tool_name(fn_name).value;
    let description = match &options.description {
        Some(d) => quote!(#d),
        None => doc::description(&model.docs).unwrap_or_else(|| quote!("")),
    };

    // The args struct: one field per parameter, typed by its role
    // (`<T as ToolArg>::Field`: `T` for data, a placeholder for injected ones).
    let mut defaults = Vec::new();
    let mut fields = Vec::new();
    let mut whole_fields = Vec::new();
    let mut call_args = Vec::new();
    let mut prepares = Vec::new();
    let mut arg_schemas = Vec::new();
    let mut arg_types = Vec::new();
    let mut injects = Vec::new();
    for (i, p) in model.params.iter().enumerate() {
        let ty = &p.ty;
        let field = p.field(i);
        let name = p.field_name(i);
        // The parameter type, reached through its checked role: a type that
        // is no `ToolArg` is reported once, at `__HAIP_ROLE_<i>`.
        let arg = format_ident!("__HaipArg{}", i);
        let role = check::role_const(i);
        arg_types.push(quote_spanned! {ty.span()=>
            type #arg = <__haip::Checked<{ #fn_name::#role as u8 }, #ty> as __haip::Arg>::Is;
        });
        let as_arg = quote_spanned!(ty.span()=> <#arg as __haip::ToolArg>);
        let field_ty = quote_spanned!(ty.span()=> <#arg as __haip::ToolArg>::Field);
        let docs = doc::description(&p.docs).map(|d| quote!(#[doc = #d]));
        let default = p.default.as_ref().map(|(expr, _)| {
            let f = format_ident!("__haip_default_{}", i);
            let path = LitStr::new(&f.to_string(), proc_macro2::Span::call_site());
            // A value of the parameter's type, or one that converts into it
            // (into `X` for an `Option<X>`): see `__private::DefaultProbe`.
            defaults.push(quote! {
                fn #f() -> #field_ty {
                    let __kind = (&&&__haip::DefaultProbe::<#arg, _>::of(|| #expr)).haip_default();
                    #as_arg::into_field(__kind.make(#expr))
                }
            });
            quote!(#[serde(default = #path)])
        });
        let attrs = &p.field_attrs;
        fields.push(quote! { #docs #(#attrs)* #default #field: #field_ty });
        whole_fields.push(quote! { #field: #as_arg::whole_field(#tool_name, &mut __whole)? });
        // What the runtime injects, asked once (a `State<T>` whose `T` cannot
        // be shared is reported here, across the parameter's type); the
        // handler uses the answer's function pointers, which need no bound.
        let inject = format_ident!("__haip_inject_{}", i);
        // rustc blames the argument or, when the type is only known late
        // (through `Checked`), the whole call: both span the type.
        let injected = spanning(ty, quote!(__haip::injected::<#arg>()));
        let glue = spanning(ty, quote!(__haip::InjectedArg::glue(#injected)));
        injects.push(quote! { let #inject = #glue; });
        call_args.push(quote! { #as_arg::from_parts(__args.#field, (#inject.extract)(&__ctx)?) });
        prepares.push(quote! { let __builder = (#inject.prepare)(__builder); });
        arg_schemas.push(quote! { __haip::arg_schema::<#arg>(#name) });
    }
    let parse_args = if model.params.is_empty() {
        quote!(__haip::deserialize_params(#tool_name, __params)?)
    } else {
        // `__HAIP_WHOLE` is a constant: one branch is compiled away.
        quote! {
            if Self::__HAIP_WHOLE {
                let mut __whole = ::core::option::Option::Some(__params);
                __HaipArgs { #(#whole_fields,)* }
            } else {
                __haip::deserialize_params(#tool_name, __params)?
            }
        }
    };

    // `Result<T, E>` under any name is found by the type system (autoref
    // specialisation on `Returns<R>`); anything else is a plain value. `T`
    // must be a `ToolOutput` and `E` a `ToolErrorType`: each is asked once,
    // across the return type, and the rest uses the functions they give.
    let (glue, convert, output_schema) = match &model.output {
        Output::Unit => (
            quote!(),
            quote! {
                let () = __out;
                ::core::result::Result::Ok(__haip::serde_json::Value::Null)
            },
            quote!(::core::option::Option::None),
        ),
        Output::Returns(ret) => {
            let returns = quote!((&__haip::Returns::<#ret>::new()).haip_output());
            let ok_type = spanning(ret, quote!(#returns.ok_type()));
            let err_type = spanning(ret, quote!(#returns.err_type()));
            let output_glue = spanning(ret, quote!(__haip::ToolOutput::glue(#ok_type)));
            let error_glue = spanning(ret, quote!(__haip::ToolErrorType::glue(#err_type)));
            (
                quote! {
                    let __haip_output = #output_glue;
                    let __haip_error = #error_glue;
                },
                quote! {
                    (&__haip::Returns::<#ret>::new())
                        .haip_output()
                        .split(__out)
                        .map_err(|__e| (&__haip::ErrWrap::new(__e, __haip_error)).haip_tool_error())
                        .and_then(|__v| (__haip_output.to_json)(#tool_name, __v))
                },
                quote!((__haip_output.schema)()),
            )
        }
    };
    let handler = if func.sig.asyncness.is_some() {
        quote! {
            .handler(move |__params: __haip::serde_json::Value, __ctx: __haip::Context| async move {
                let __args: __HaipArgs = #parse_args;
                let __out = #fn_name(#(#call_args),*).await;
                #convert
            })
        }
    } else {
        quote! {
            .blocking_handler(move |__params: __haip::serde_json::Value, __ctx: __haip::Context| {
                let __args: __HaipArgs = #parse_args;
                let __out = #fn_name(#(#call_args),*);
                #convert
            })
        }
    };
    let timeout = options
        .timeout
        .as_ref()
        .map(|(ms, _)| quote!(.timeout(__haip::millis(#ms))));
    let title = options.title.as_ref().map(|t| quote!(.title(#t)));
    let annotations = annotations(&options.hints);
    let icons = options.icons.iter().map(icon);
    let task = options.task.map(task_support);
    let scopes = (!options.scopes.is_empty()).then(|| {
        let scopes = &options.scopes;
        quote!(.scopes([#(#scopes),*]))
    });
    let tags = (!options.tags.is_empty()).then(|| {
        let tags = &options.tags;
        quote!(.tags([#(#tags),*]))
    });
    let role_checks = check::role_checks(model, &krate);
    let doc_type = format!(
        "The `#[haip_tool]` tool `{tool_name}`, built from [`{fn_name}`](fn@{fn_name}): \
         pass [`{fn_name}::tool()`](Self::tool) to `Server::builder().tool(...)`."
    );

    // A braced struct lives in the type namespace only, so it can share the
    // function's name (and `add::tool()` reads naturally) wherever the function
    // is defined, in a module or inside a block.
    quote! {
        #func

        #[doc = #doc_type]
        #[allow(non_camel_case_types, dead_code)]
        #vis struct #fn_name {}

        #role_checks

        #[allow(dead_code, clippy::all, clippy::pedantic)]
        impl #fn_name {
            /// Whether a parameter is the whole params object (`Params<T>`).
            const __HAIP_WHOLE: bool = #private::has_whole(&Self::__HAIP_ROLES);

            /// Builds the tool.
            ///
            /// # Panics
            ///
            /// If the schema derived from the signature does not compile (a
            /// validation attribute with an invalid pattern, say);
            /// [`try_tool`](Self::try_tool) returns that error instead.
            pub fn tool() -> #private::Tool {
                match Self::try_tool() {
                    ::core::result::Result::Ok(tool) => tool,
                    ::core::result::Result::Err(e) => ::core::panic!("{}", e),
                }
            }

            /// Builds the tool, or says why its definition is invalid.
            pub fn try_tool() -> ::core::result::Result<#private::Tool, #private::Error> {
                use #krate::__private as __haip;
                #[allow(unused_imports)]
                use __haip::{ReturnsResult as _, ReturnsValue as _, ViaDisplay as _, ViaToolError as _};
                #[allow(unused_imports)]
                use __haip::{DefaultExact as _, DefaultInto as _, DefaultSome as _, DefaultSomeInto as _};

                #(#arg_types)*
                #[derive(#private::serde::Deserialize, #private::schemars::JsonSchema)]
                #[serde(crate = #serde_path, deny_unknown_fields)]
                #[schemars(crate = #schemars_path)]
                struct __HaipArgs { #(#fields,)* }
                #(#defaults)*
                #(#injects)*
                #glue

                // One per function, wherever the tool is built: its address
                // tells `annotated_tools` that a tool given otherwise is this one.
                static __HAIP_DEFINITION: __haip::Definition = __haip::Definition {
                    name: #tool_name,
                    module: ::core::module_path!(),
                    file: ::core::file!(),
                    line: ::core::line!(),
                };
                let __builder = __haip::Tool::builder(#tool_name)
                    .description(#description)
                    .input_schema(__haip::args_input_schema::<__HaipArgs>(&[#(#arg_schemas),*]))
                    #timeout
                    #title
                    #annotations
                    #(#icons)*
                    #task
                    #scopes
                    #tags;
                let __builder = __haip::output_schema(__builder, #output_schema);
                let __builder = __haip::definition(__builder, &__HAIP_DEFINITION);
                #(#prepares)*
                __builder #handler .build()
            }
        }

        #private::inventory::submit! {
            #private::ToolRegistration {
                name: #tool_name,
                module: ::core::module_path!(),
                file: ::core::file!(),
                line: ::core::line!(),
                make: #fn_name::try_tool,
            }
        }
    }
}

/// `.annotations(...)` with the hints written, or nothing when none is (so a
/// tool that declares nothing sends no `annotations`).
fn annotations(hints: &Hints) -> Option<TokenStream> {
    let set: Vec<TokenStream> = [
        ("read_only", &hints.read_only),
        ("destructive", &hints.destructive),
        ("idempotent", &hints.idempotent),
        ("open_world", &hints.open_world),
    ]
    .into_iter()
    .filter_map(|(method, flag)| {
        let value = flag.as_ref()?.value;
        let method = format_ident!("{}", method);
        Some(quote!(.#method(#value)))
    })
    .collect();
    if set.is_empty() {
        return None;
    }
    Some(quote!(.annotations(__haip::ToolAnnotations::new() #(#set)*)))
}

/// `.icon(...)` for one `icon` option.
fn icon(icon: &IconOption) -> TokenStream {
    let src = &icon.src;
    let mime_type = icon.mime_type.as_ref().map(|m| quote!(.with_mime_type(#m)));
    let sizes = &icon.sizes;
    let sizes = (!sizes.is_empty()).then(|| quote!(.with_sizes([#(#sizes),*])));
    let theme = icon.theme.map(|theme| match theme {
        Theme::Light => quote!(.with_theme(__haip::IconTheme::Light)),
        Theme::Dark => quote!(.with_theme(__haip::IconTheme::Dark)),
    });
    quote!(.icon(__haip::Icon::new(#src) #mime_type #sizes #theme))
}

/// `.task_support(...)` for a `task` option (only when it is written).
fn task_support(task: TaskSupport) -> TokenStream {
    let variant = format_ident!("{}", task.variant());
    quote!(.task_support(__haip::TaskSupport::#variant))
}

/// `expr` spanning all of `at`: its top-level tokens at the first token of
/// `at`, its last one at the last token, so rustc underlines all of `at` for an
/// error in `expr` or any part of it (a `Span` covers one token on stable, and
/// a span joined from the user's and the macro's tokens is the macro's).
/// `expr` must name no local variable at its top level: a user's span may
/// carry a `macro_rules!` hygiene context.
fn spanning(at: &dyn ToTokens, expr: TokenStream) -> TokenStream {
    let mut spans = at.to_token_stream().into_iter().map(|t| t.span());
    let start = spans.next().unwrap_or_else(proc_macro2::Span::call_site);
    let end = spans.last().unwrap_or(start);
    let mut tokens: Vec<TokenTree> = expr.into_iter().collect();
    let last = tokens.len().saturating_sub(1);
    for (i, token) in tokens.iter_mut().enumerate() {
        token.set_span(if i == last { end } else { start });
    }
    tokens.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::Errors;
    use syn::parse_quote;

    fn expand_fn(f: syn::ItemFn, options: proc_macro2::TokenStream) -> String {
        let mut errors = Errors::default();
        let options = Options::parse(options, &mut errors);
        let model = ToolFn::parse(f, &mut errors);
        assert!(errors.is_empty());
        expand(&model, &options).to_string()
    }

    #[test]
    fn types_decide_not_names() {
        let out = expand_fn(
            parse_quote! {
                async fn t(a: State<u8>, ctx: Context, Params(p): Params<Q>) -> Result<u8, E> { todo!() }
            },
            quote!(),
        );
        // No parameter is special-cased: every one goes through `ToolArg`.
        for needle in [
            "type __HaipArg0 = < __haip :: Checked < { t :: __HAIP_ROLE_0 as u8 } , State < u8 > > as __haip :: Arg > :: Is ;",
            "type __HaipArg1 = < __haip :: Checked < { t :: __HAIP_ROLE_1 as u8 } , Context > as __haip :: Arg > :: Is ;",
            "a : < __HaipArg0 as __haip :: ToolArg > :: Field",
            "ctx : < __HaipArg1 as __haip :: ToolArg > :: Field",
            "__haip_arg_2 : < __HaipArg2 as __haip :: ToolArg > :: Field",
            "__haip :: arg_schema :: < __HaipArg0 > (\"a\")",
            "< __HaipArg1 as __haip :: ToolArg > :: from_parts (__args . ctx , (__haip_inject_1 . extract) (& __ctx) ?)",
            "__haip :: Returns :: < Result < u8 , E > > :: new ()",
        ] {
            assert!(out.contains(needle), "{needle}: {out}");
        }
    }

    #[test]
    fn each_role_is_asked_once() {
        let out = expand_fn(
            parse_quote! {
                fn t(a: A, b: State<S>) -> Result<u8, E> { todo!() }
            },
            quote!(),
        );
        // One question per parameter and per side of the result; everything
        // else goes through the answers, so a missing bound is one error.
        let count = |needle: &str| out.matches(needle).count();
        assert_eq!(count("__haip :: InjectedArg :: glue"), 2, "{out}");
        assert_eq!(
            count(
                "let __haip_inject_0 = __haip :: InjectedArg :: glue (__haip :: injected :: < __HaipArg0 > ())"
            ),
            1,
            "{out}"
        );
        assert_eq!(count("__haip :: ToolOutput :: glue"), 1, "{out}");
        assert_eq!(count("__haip :: ToolErrorType :: glue"), 1, "{out}");
        assert_eq!(count(". ok_type ()"), 1, "{out}");
        assert_eq!(count(". err_type ()"), 1, "{out}");
        assert_eq!(count("(__haip_output . to_json)"), 1, "{out}");
        assert_eq!(count("(__haip_output . schema) ()"), 1, "{out}");
    }

    #[test]
    fn spanning_keeps_the_tokens() {
        let ty: syn::Type = parse_quote!(Result<u8, Oops>);
        let out = spanning(&ty, quote!(__haip::ToolOutput::glue(x.ok_type())));
        assert_eq!(
            out.to_string(),
            quote!(__haip::ToolOutput::glue(x.ok_type())).to_string()
        );
        assert!(spanning(&ty, TokenStream::new()).is_empty());
    }

    #[test]
    fn title_hints_and_icons_go_on_the_builder() {
        let out = expand_fn(
            parse_quote! { fn t() {} },
            quote!(
                title = "Delete a repository",
                destructive,
                idempotent = false,
                icon = "https://example.com/a.svg",
                icon(
                    src = "b.png",
                    mime_type = "image/png",
                    sizes = ["48x48", "any"],
                    theme = "dark"
                )
            ),
        );
        for needle in [
            ". title (\"Delete a repository\")",
            ". annotations (__haip :: ToolAnnotations :: new () . destructive (true) . idempotent (false))",
            ". icon (__haip :: Icon :: new (\"https://example.com/a.svg\"))",
            ". icon (__haip :: Icon :: new (\"b.png\") . with_mime_type (\"image/png\") . with_sizes ([\"48x48\" , \"any\"]) . with_theme (__haip :: IconTheme :: Dark))",
        ] {
            assert!(out.contains(needle), "{needle}: {out}");
        }
        // Nothing declared: no annotations at all (MCP's defaults apply).
        let out = expand_fn(parse_quote! { fn t() {} }, quote!());
        for absent in [". title", ". annotations", ". icon (", ". task_support"] {
            assert!(!out.contains(absent), "{absent}: {out}");
        }
    }

    #[test]
    fn task_support_goes_on_the_builder_when_written() {
        for (option, variant) in [
            (quote!(task), "Optional"),
            (quote!(task = "optional"), "Optional"),
            (quote!(task = "required"), "Required"),
            (quote!(task = "forbidden"), "Forbidden"),
        ] {
            let out = expand_fn(parse_quote! { async fn t() {} }, option.clone());
            let needle = format!(". task_support (__haip :: TaskSupport :: {variant})");
            assert_eq!(out.matches(&needle).count(), 1, "{option}: {out}");
        }
        // Beside the other options, through the crate named by `crate`.
        let out = expand_fn(
            parse_quote! { fn t() {} },
            quote!(
                title = "Report",
                destructive,
                task = "required",
                crate = "my_haip"
            ),
        );
        assert!(
            out.contains(
                ". annotations (__haip :: ToolAnnotations :: new () . destructive (true)) \
                 . task_support (__haip :: TaskSupport :: Required) ;"
            ),
            "{out}"
        );
        assert!(out.contains("use my_haip :: __private as __haip"), "{out}");
    }

    #[test]
    fn unit_has_no_output_conversion_and_crate_is_honoured() {
        let out = expand_fn(parse_quote! { fn t() {} }, quote!(crate = "my_haip"));
        assert!(!out.contains("Returns ::"), "{out}");
        assert!(out.contains("Value :: Null"), "{out}");
        assert!(out.contains("use my_haip :: __private as __haip"), "{out}");
        assert!(out.contains("\"my_haip::__private::serde\""), "{out}");
        assert!(!out.contains(":: haip ::"), "{out}");
    }
}
