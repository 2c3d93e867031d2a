//! What `#[haip_tool]` emits when the function breaks its syntactic rules:
//! the user's function unchanged (minus parameter attributes), every error,
//! the role checks that can still run, and a stand-in for the generated type
//! so call sites such as `add::tool()` still compile and the only errors shown
//! are the real ones.

use proc_macro2::TokenStream;
use quote::quote;

use crate::attr::Options;
use crate::check;
use crate::errors::Errors;
use crate::model::ToolFn;

pub(crate) fn fallback(model: &ToolFn, options: &Options, errors: &Errors) -> TokenStream {
    let func = &model.emitted();
    let vis = &func.vis;
    let name = model.name();
    let krate = options.crate_path();
    let errors = errors.to_compile_errors();
    if model.receiver.is_some() {
        // A method lives in an `impl` block, where no stand-in type can go.
        return quote! { #errors #func };
    }
    let role_checks = check::role_checks(model, &krate);
    quote! {
        #errors
        #func

        #[allow(non_camel_case_types, dead_code)]
        #vis struct #name {}

        #role_checks

        #[allow(dead_code)]
        impl #name {
            /// Stand-in while the function has errors.
            pub fn tool() -> #krate::__private::Tool {
                ::core::unreachable!("#[haip_tool] reported errors at compile time")
            }
            /// Stand-in while the function has errors.
            pub fn try_tool() -> ::core::result::Result<#krate::__private::Tool, #krate::__private::Error> {
                ::core::unreachable!("#[haip_tool] reported errors at compile time")
            }
        }
    }
}
