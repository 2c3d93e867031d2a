//! Code generation for a checked `#[haip_tool]` function.
//!
//! Nothing here depends on how a type is spelled. Each parameter's type says
//! what it is through `ToolArg` (data, `Context`, `State<T>`, `Params<T>`) and
//! the return type is probed for `Result<T, E>` through `Returns`, all at
//! compile time or once when the tool is built, never per call.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::LitStr;
use syn::spanned::Spanned;

use crate::attr::{self, Options};
use crate::check;
use crate::doc;
use crate::model::{Output, ToolFn};

pub(crate) fn expand(model: &ToolFn, options: &Options) -> TokenStream {
    let krate = options.crate_path();
    let (serde_path, schemars_path) = attr::derive_crates(&krate);
    let private = quote!(#krate::__private);

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

    // The args struct: one field per parameter, typed by its role
    // (`<T as ToolArg>::Field`: `T` for data, a placeholder for injected ones).
    let mut defaults = Vec::new();
    let mut fields = Vec::new();
    let mut whole_fields = Vec::new();
    let mut call_args = Vec::new();
    let mut prepares = Vec::new();
    let mut arg_schemas = Vec::new();
    let mut arg_types = Vec::new();
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
            defaults.push(quote! {
                fn #f() -> #field_ty { #as_arg::into_field(#expr) }
            });
            quote!(#[serde(default = #path)])
        });
        let attrs = &p.field_attrs;
        fields.push(quote! { #docs #(#attrs)* #default #field: #field_ty });
        whole_fields.push(quote! { #field: #as_arg::whole_field(#tool_name, &mut __whole)? });
        call_args.push(quote! { #as_arg::from_field(__args.#field, &__ctx)? });
        prepares.push(quote! { let __builder = #as_arg::prepare(__builder); });
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

    let (convert, output_schema) = match &model.output {
        Output::Unit => (
            quote! {
                let () = __out;
                ::core::result::Result::Ok(__haip::serde_json::Value::Null)
            },
            quote!(::core::option::Option::None),
        ),
        // `Result<T, E>` under any name is found by the type system (autoref
        // specialisation on `Returns<R>`); anything else is a plain value.
        // All spanned at the return type: a missing bound is reported there
        // (once: rustc merges identical errors at one span).
        Output::Returns(ret) => (
            quote_spanned! {ret.span()=>
                (&__haip::Returns::<#ret>::new())
                    .haip_output()
                    .split(__out)
                    .map_err(|__e| (&__haip::ErrWrap::new(__e)).haip_tool_error())
                    .and_then(|__v| __haip::serialize_output(#tool_name, __v))
            },
            quote_spanned!(ret.span()=> (&__haip::Returns::<#ret>::new()).haip_output().schema()),
        ),
    };
    let handler = if func.sig.asyncness.is_some() {
        quote! {
            .handler(|__params: __haip::serde_json::Value, __ctx: __haip::Context| async move {
                let __args: __HaipArgs = #parse_args;
                let __out = #fn_name(#(#call_args),*).await;
                #convert
            })
        }
    } else {
        quote! {
            .blocking_handler(|__params: __haip::serde_json::Value, __ctx: __haip::Context| {
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

                #(#arg_types)*
                #[derive(#private::serde::Deserialize, #private::schemars::JsonSchema)]
                #[serde(crate = #serde_path, deny_unknown_fields)]
                #[schemars(crate = #schemars_path)]
                struct __HaipArgs { #(#fields,)* }
                #(#defaults)*

                let __builder = __haip::Tool::builder(#tool_name)
                    .description(#description)
                    .input_schema(__haip::args_input_schema::<__HaipArgs>(&[#(#arg_schemas),*]))
                    #timeout;
                let __builder = __haip::output_schema(__builder, #output_schema);
                #(#prepares)*
                __builder #handler .build()
            }
        }

        #private::inventory::submit! {
            #private::ToolRegistration {
                name: #tool_name,
                file: ::core::file!(),
                line: ::core::line!(),
                make: #fn_name::try_tool,
            }
        }
    }
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
            "< __HaipArg1 as __haip :: ToolArg > :: from_field (__args . ctx , & __ctx) ?",
            "__haip :: Returns :: < Result < u8 , E > > :: new ()",
        ] {
            assert!(out.contains(needle), "{needle}: {out}");
        }
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
