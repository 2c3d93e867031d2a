//! Code generation for a checked `#[haip_tool]` function.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::LitStr;
use syn::spanned::Spanned;

use crate::attr::{self, Options};
use crate::doc;
use crate::model::{Output, ParamKind, ToolFn};

pub(crate) fn expand(model: &ToolFn, options: &Options) -> TokenStream {
    let krate = options.crate_path();
    let (serde_path, schemars_path) = attr::derive_crates(&krate);

    let func = &model.func;
    let vis = &func.vis;
    let fn_name = model.name();
    let tool_name = options
        .name
        .as_ref()
        .map(LitStr::value)
        .unwrap_or_else(|| fn_name.to_string().trim_start_matches("r#").to_owned());
    let description = match &options.description {
        Some(d) => quote!(#d),
        None => doc::description(&model.docs).unwrap_or_else(|| quote!("")),
    };

    // The params type: a generated struct, or `T` of `Params<T>`.
    let mut defaults = Vec::new();
    let args_type = match model.whole_params() {
        Some(inner) => quote!(type __HaipArgs = #inner;),
        None => {
            let fields = model.args().enumerate().map(|(i, p)| {
                let ident = &p.ident;
                let ty = &p.ty;
                let docs = doc::description(&p.docs).map(|d| quote!(#[doc = #d]));
                let default = p.default.as_ref().map(|(expr, _)| {
                    let f = format_ident!("__haip_default_{}", i);
                    let path = LitStr::new(&f.to_string(), proc_macro2::Span::call_site());
                    defaults.push(quote! {
                        fn #f() -> #ty { #expr }
                    });
                    quote!(#[serde(default = #path)])
                });
                let attrs = &p.field_attrs;
                quote! { #docs #(#attrs)* #default #ident: #ty }
            });
            quote! {
                #[derive(#krate::__private::serde::Deserialize, #krate::__private::schemars::JsonSchema)]
                #[serde(crate = #serde_path, deny_unknown_fields)]
                #[schemars(crate = #schemars_path)]
                struct __HaipArgs { #(#fields,)* }
            }
        }
    };

    let call_args = model.params.iter().map(|p| match &p.kind {
        ParamKind::Arg => {
            let ident = &p.ident;
            quote!(__args.#ident)
        }
        ParamKind::Params(_) => quote!(__haip::Params(__args)),
        ParamKind::Context | ParamKind::State => {
            let ty = &p.ty;
            quote!(__haip::extract::<#ty>(&__ctx)?)
        }
        ParamKind::Receiver(_) => quote!(),
    });
    let convert = match &model.output {
        Output::Unit => quote! {
            let () = __out;
            ::core::result::Result::Ok(__haip::serde_json::Value::Null)
        },
        Output::Value(_) => quote!(__haip::serialize_output(#tool_name, __out)),
        Output::Fallible { .. } => quote! {
            match __out {
                ::core::result::Result::Ok(v) => __haip::serialize_output(#tool_name, v),
                ::core::result::Result::Err(e) => {
                    #[allow(unused_imports)]
                    use __haip::{ViaDisplay as _, ViaToolError as _};
                    ::core::result::Result::Err((&__haip::ErrWrap::new(e)).haip_tool_error())
                }
            }
        },
    };
    let output_schema = match &model.output {
        Output::Unit => quote!(::core::option::Option::None),
        Output::Value(ty) | Output::Fallible { ok: ty, .. } => {
            quote!(__haip::output_schema_for::<#ty>())
        }
    };
    let handler = if func.sig.asyncness.is_some() {
        quote! {
            .handler(|__params: __haip::serde_json::Value, __ctx: __haip::Context| async move {
                let __args: __HaipArgs = __haip::deserialize_params(#tool_name, __params)?;
                let __out = #fn_name(#(#call_args),*).await;
                #convert
            })
        }
    } else {
        quote! {
            .blocking_handler(|__params: __haip::serde_json::Value, __ctx: __haip::Context| {
                let __args: __HaipArgs = __haip::deserialize_params(#tool_name, __params)?;
                let __out = #fn_name(#(#call_args),*);
                #convert
            })
        }
    };
    let timeout = options
        .timeout
        .as_ref()
        .map(|(ms, _)| quote!(.timeout(__haip::millis(#ms))));
    let injections = model
        .params
        .iter()
        .filter(|p| matches!(p.kind, ParamKind::Context | ParamKind::State))
        .map(|p| {
            let ty = &p.ty;
            quote!(let __builder = __haip::inject::<#ty>(__builder);)
        });
    let checks = bound_checks(model);
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

        #[allow(dead_code, clippy::all, clippy::pedantic)]
        impl #fn_name {
            /// Builds the tool.
            ///
            /// # Panics
            ///
            /// If the schema derived from the signature does not compile (a
            /// validation attribute with an invalid pattern, say);
            /// [`try_tool`](Self::try_tool) returns that error instead.
            pub fn tool() -> #krate::__private::Tool {
                match Self::try_tool() {
                    ::core::result::Result::Ok(tool) => tool,
                    ::core::result::Result::Err(e) => ::core::panic!("{}", e),
                }
            }

            /// Builds the tool, or says why its definition is invalid.
            pub fn try_tool() -> ::core::result::Result<#krate::__private::Tool, #krate::__private::Error> {
                use #krate::__private as __haip;

                #args_type
                #(#defaults)*

                #[allow(dead_code)]
                fn __haip_checks() {
                    #checks
                }

                let __builder = __haip::Tool::builder(#tool_name)
                    .description(#description)
                    .input_schema(__haip::input_schema_for::<__HaipArgs>())
                    #timeout;
                let __builder = __haip::output_schema(__builder, #output_schema);
                #(#injections)*
                __builder #handler .build()
            }
        }

        #krate::__private::inventory::submit! {
            #krate::__private::ToolRegistration {
                name: #tool_name,
                file: ::core::file!(),
                line: ::core::line!(),
                make: #fn_name::try_tool,
            }
        }
    }
}

/// Bound checks at the user's own tokens, so a missing `JsonSchema` or
/// `Deserialize` is reported on the parameter's type, not on the attribute.
fn bound_checks(model: &ToolFn) -> TokenStream {
    let mut checks = TokenStream::new();
    for p in &model.params {
        let ty = &p.ty;
        checks.extend(match &p.kind {
            ParamKind::Arg => quote_spanned!(ty.span()=> __haip::assert_param::<#ty>();),
            ParamKind::Params(inner) => {
                quote_spanned!(inner.span()=> __haip::assert_param::<#inner>();)
            }
            ParamKind::Context | ParamKind::State => {
                quote_spanned!(ty.span()=> __haip::assert_injected::<#ty>();)
            }
            ParamKind::Receiver(_) => quote!(),
        });
    }
    match &model.output {
        Output::Unit => {}
        Output::Value(ty) => {
            checks.extend(quote_spanned!(ty.span()=> __haip::assert_output::<#ty>();))
        }
        Output::Fallible { ok, err } => {
            checks.extend(quote_spanned!(ok.span()=> __haip::assert_output::<#ok>();));
            if let Some(err) = err {
                checks.extend(quote_spanned!(err.span()=> __haip::assert_error::<#err>();));
            }
        }
    }
    checks
}
