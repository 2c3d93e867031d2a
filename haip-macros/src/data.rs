//! `#[haip::data]`: serde's and schemars' derives through `haip`, and a check
//! of the types inside the fields, so that a field whose type is not data (a
//! type of the user's without `#[haip::data]`, in `Vec<T>`, `Option<T>`, a map
//! or as is) is one error at that type, in haip's words, rather than a page of
//! serde's and schemars' errors from inside their derives.
//!
//! How it is one error:
//!
//! - A hidden `const` per item asks `<T as DataField>::CHECKED` of each type
//!   `T` found inside the fields (`Address` of `Vec<Address>`), at `T`'s
//!   tokens. `DataField` is `JsonSchema` under haip's message; `JsonSchema`,
//!   because schemars puts no bounds on the impls of non-generic types, so
//!   answering it never reaches another data type's `const` (two types that
//!   contain each other compile as before).
//! - Each checked field gets `#[serde(bound = "FieldsOk<{ CONST }>: FieldsChecked")]`
//!   and `#[schemars(with = "<FieldsOk<{ CONST }> as FieldsChecked>::Field<T>")]`.
//!   Both are what they were (a bound that always holds, the field's own type)
//!   when the `const` can be evaluated; when it cannot, rustc has reported
//!   that error and says nothing more about the impls that name it, nor
//!   where the type is used.
//!
//! Fields whose types serde or schemars do not need (`skip`, `with`, ...),
//! types naming the item's generic parameters or lifetimes, and items serde
//! converts through another type (`from`, `into`, `remote`) are left as they
//! are.

use std::collections::BTreeSet;

use proc_macro2::TokenStream;
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{
    Attribute, Data, DeriveInput, Fields, GenericArgument, LitStr, Path, PathArguments, Type,
};

use crate::attr::{self, DataOptions};
use crate::errors::Errors;
use crate::keys::skip_value;

/// Expands `#[haip::data(args)] item`.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let options = DataOptions::parse(args, &mut errors);
    let krate = options.crate_path();
    let (serde_path, schemars_path) = attr::derive_crates(&krate);
    let errors = errors.to_compile_errors();
    let (check, form, item) = match syn::parse2::<DeriveInput>(item.clone()) {
        Ok(mut input) => {
            let check = check_fields(&mut input, &krate);
            let form = question_form(&input, &krate);
            (check, form, input.into_token_stream())
        }
        // Not a struct or an enum: the derives say so.
        Err(_) => (TokenStream::new(), TokenStream::new(), item),
    };
    quote! {
        #errors
        #check
        #[derive(
            #krate::__private::serde::Serialize,
            #krate::__private::serde::Deserialize,
            #krate::__private::schemars::JsonSchema
        )]
        #[serde(crate = #serde_path)]
        #[schemars(crate = #schemars_path)]
        #item
        #form
    }
}

/// `impl QuestionForm` for a struct with named fields: what a question may
/// ask for (`ctx.ask::<T>`); nothing for enums, tuple and unit structs.
fn question_form(input: &DeriveInput, krate: &Path) -> TokenStream {
    let Data::Struct(data) = &input.data else {
        return TokenStream::new();
    };
    if !matches!(data.fields, Fields::Named(_)) {
        return TokenStream::new();
    }
    let ident = &input.ident;
    let (impl_generics, type_generics, where_clause) = input.generics.split_for_impl();
    quote! {
        #[automatically_derived]
        impl #impl_generics #krate::__private::QuestionForm for #ident #type_generics #where_clause {}
    }
}

/// Adds the attributes of the check to the fields that need one, and returns
/// the `const` they name (nothing when no field needs checking).
fn check_fields(input: &mut DeriveInput, krate: &Path) -> TokenStream {
    if has_key(&input.attrs, CONTAINER_KEYS) {
        return TokenStream::new();
    }
    let open = Open::of(input);
    let name = format_ident!("__HAIP_DATA_{}", input.ident);
    let root = attr::path_text(krate);
    let mut types: Vec<Type> = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut check = |fields: &mut Fields| {
        for field in fields.iter_mut() {
            if has_key(&field.attrs, FIELD_KEYS) || !open.is_closed(&field.ty) {
                continue;
            }
            let mut found = Vec::new();
            inner_types(&field.ty, &mut found);
            let found: Vec<&Type> = found.into_iter().filter(|t| !is_scalar(t)).collect();
            let text = field.ty.to_token_stream().to_string();
            // The type goes into a string that serde and schemars parse back.
            if found.is_empty() || syn::parse_str::<Type>(&text).is_err() {
                continue;
            }
            for ty in found {
                if seen.insert(ty.to_token_stream().to_string()) {
                    types.push(ty.clone());
                }
            }
            let span = field.ty.span();
            let checked = format!("{root}::__private::FieldsOk<{{ {name} }}>");
            let bound = LitStr::new(
                &format!("{checked}: {root}::__private::FieldsChecked"),
                span,
            );
            let with = LitStr::new(
                &format!("<{checked} as {root}::__private::FieldsChecked>::Field<{text}>"),
                span,
            );
            field
                .attrs
                .push(syn::parse_quote!(#[serde(bound(serialize = #bound, deserialize = #bound))]));
            field
                .attrs
                .push(syn::parse_quote!(#[schemars(with = #with)]));
        }
    };
    match &mut input.data {
        Data::Struct(data) => check(&mut data.fields),
        Data::Enum(data) => {
            for variant in &mut data.variants {
                if !has_key(&variant.attrs, FIELD_KEYS) {
                    check(&mut variant.fields);
                }
            }
        }
        Data::Union(_) => {}
    }
    if types.is_empty() {
        return TokenStream::new();
    }
    let terms = types
        .iter()
        .map(|ty| quote_spanned!(ty.span()=> <#ty as #krate::__private::DataField>::CHECKED));
    quote! {
        #[doc(hidden)]
        #[allow(non_upper_case_globals, dead_code, clippy::all, clippy::pedantic)]
        const #name: u8 = #(#terms)+*;
    }
}

/// serde and schemars keys on the item under which serde does not use the
/// fields' own impls, or schemars not their schemas.
const CONTAINER_KEYS: &[&str] = &["remote", "from", "try_from", "into", "with", "schema_with"];

/// Keys on a field (or a variant) under which its type needs no impls, or
/// that the check's attributes would repeat.
const FIELD_KEYS: &[&str] = &[
    "skip",
    "skip_serializing",
    "skip_deserializing",
    "with",
    "serialize_with",
    "deserialize_with",
    "schema_with",
    "getter",
    "bound",
];

/// Whether one of the `#[serde(...)]` / `#[schemars(...)]` attributes has one
/// of `keys` at its top level (or cannot be read: then it is left alone).
fn has_key(attrs: &[Attribute], keys: &[&str]) -> bool {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("serde") || a.path().is_ident("schemars"))
        .any(|a| {
            let mut found = false;
            let read = a.parse_nested_meta(|meta| {
                if keys.iter().any(|k| meta.path.is_ident(k)) {
                    found = true;
                }
                skip_value(&meta)
            });
            found || read.is_err()
        })
}

/// The item's generic parameters and lifetimes, and its name: a field type
/// that names one cannot be asked about outside the item.
struct Open {
    names: Vec<String>,
}

impl Open {
    fn of(input: &DeriveInput) -> Open {
        let mut names: Vec<String> = input
            .generics
            .params
            .iter()
            .map(|p| match p {
                syn::GenericParam::Type(t) => t.ident.to_string(),
                syn::GenericParam::Lifetime(l) => l.lifetime.ident.to_string(),
                syn::GenericParam::Const(c) => c.ident.to_string(),
            })
            .collect();
        names.push(input.ident.to_string());
        names.push("Self".to_owned());
        Open { names }
    }

    /// Whether `ty` can be named in a `const` beside the item: no generic
    /// parameter, lifetime, `Self`, the item itself, `impl`, `_` or macro.
    fn is_closed(&self, ty: &Type) -> bool {
        fn walk(tokens: TokenStream, names: &[String]) -> bool {
            tokens.into_iter().all(|token| match token {
                proc_macro2::TokenTree::Ident(ident) => {
                    let ident = ident.to_string();
                    ident != "impl" && ident != "_" && !names.contains(&ident)
                }
                proc_macro2::TokenTree::Punct(p) => p.as_char() != '\'' && p.as_char() != '!',
                proc_macro2::TokenTree::Group(g) => walk(g.stream(), names),
                proc_macro2::TokenTree::Literal(_) => true,
            })
        }
        walk(ty.to_token_stream(), &self.names)
    }
}

/// The types a field's type is made of, as far as the standard containers
/// go: `Address` of `Vec<Address>`, `Option<Box<Address>>`,
/// `HashMap<String, Address>`, `[Address; 2]` or `(Address, u8)`.
fn inner_types<'a>(ty: &'a Type, out: &mut Vec<&'a Type>) {
    match ty {
        Type::Paren(t) => inner_types(&t.elem, out),
        Type::Group(t) => inner_types(&t.elem, out),
        Type::Array(t) => inner_types(&t.elem, out),
        Type::Slice(t) => inner_types(&t.elem, out),
        Type::Tuple(t) if !t.elems.is_empty() => t.elems.iter().for_each(|e| inner_types(e, out)),
        Type::Path(t) if t.qself.is_none() => {
            let Some(last) = t.path.segments.last() else {
                return out.push(ty);
            };
            let taken = match last.ident.to_string().as_str() {
                "Option" | "Vec" | "Box" | "VecDeque" | "LinkedList" | "BTreeSet" | "HashSet"
                | "BinaryHeap" | "Rc" | "Arc" => 1,
                "BTreeMap" | "HashMap" | "IndexMap" => 2,
                _ => 0,
            };
            let args: Vec<&Type> = match &last.arguments {
                PathArguments::AngleBracketed(a) => a
                    .args
                    .iter()
                    .filter_map(|a| match a {
                        GenericArgument::Type(t) => Some(t),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            if taken == 0 || args.len() < taken {
                return out.push(ty);
            }
            args.into_iter()
                .take(taken)
                .for_each(|a| inner_types(a, out));
        }
        _ => out.push(ty),
    }
}

/// Types that are data whatever the crate: no need to ask.
fn is_scalar(ty: &Type) -> bool {
    let Type::Path(t) = ty else { return false };
    t.qself.is_none()
        && t.path.get_ident().is_some_and(|ident| {
            matches!(
                ident.to_string().as_str(),
                "bool"
                    | "char"
                    | "String"
                    | "u8"
                    | "u16"
                    | "u32"
                    | "u64"
                    | "u128"
                    | "usize"
                    | "i8"
                    | "i16"
                    | "i32"
                    | "i64"
                    | "i128"
                    | "isize"
                    | "f32"
                    | "f64"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn expand_item(item: TokenStream) -> String {
        expand(TokenStream::new(), item).to_string()
    }

    fn inner(ty: Type) -> Vec<String> {
        let mut out = Vec::new();
        inner_types(&ty, &mut out);
        out.iter()
            .map(|t| t.to_token_stream().to_string())
            .collect()
    }

    #[test]
    fn the_types_inside_standard_containers_are_checked() {
        assert_eq!(inner(parse_quote!(Vec<Address>)), ["Address"]);
        assert_eq!(inner(parse_quote!(Option<Box<Address>>)), ["Address"]);
        assert_eq!(
            inner(parse_quote!(std::collections::HashMap<String, Line>)),
            ["String", "Line"]
        );
        assert_eq!(inner(parse_quote!([Address; 2])), ["Address"]);
        assert_eq!(inner(parse_quote!((Address, u8))), ["Address", "u8"]);
        assert_eq!(inner(parse_quote!(MyList<Address>)), ["MyList < Address >"]);
        assert_eq!(inner(parse_quote!(())), ["()"]);
    }

    #[test]
    fn fields_of_other_types_get_the_check() {
        let out = expand_item(quote! {
            struct Order { id: u64, ship_to: Address, lines: Vec<Line>, note: Option<String> }
        });
        assert!(
            out.contains(
                "const __HAIP_DATA_Order : u8 = < Address as :: haip :: __private :: DataField > :: CHECKED \
                 + < Line as :: haip :: __private :: DataField > :: CHECKED ;"
            ),
            "{out}"
        );
        assert_eq!(out.matches("# [schemars (with =").count(), 2, "{out}");
        assert!(
            out.contains(
                "# [serde (bound (serialize = \"::haip::__private::FieldsOk<{ __HAIP_DATA_Order }>: \
                 ::haip::__private::FieldsChecked\""
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "# [schemars (with = \"<::haip::__private::FieldsOk<{ __HAIP_DATA_Order }> as \
                 ::haip::__private::FieldsChecked>::Field<Vec < Line >>\")] lines"
            ),
            "{out}"
        );
    }

    #[test]
    fn only_scalars_need_no_check() {
        let out = expand_item(quote! { struct P { x: i32, y: Option<Vec<String>> } });
        assert!(!out.contains("__HAIP_DATA"), "{out}");
        assert!(!out.contains("schemars (with"), "{out}");
    }

    #[test]
    fn what_serde_does_not_need_is_left_alone() {
        let out = expand_item(quote! {
            struct S<T> {
                #[serde(skip)] cache: Cache,
                #[serde(with = "module")] when: When,
                #[schemars(with = "String")] id: Id,
                items: Vec<T>,
                borrowed: Wrapper<'static>,
                me: Option<Box<S<u8>>>,
                checked: Address,
            }
        });
        assert!(
            out.contains(
                "const __HAIP_DATA_S : u8 = < Address as :: haip :: __private :: DataField > :: CHECKED ;"
            ),
            "{out}"
        );
        assert_eq!(out.matches("# [schemars (with = \"<").count(), 1, "{out}");
        for item in [
            quote!(
                #[serde(from = "Raw")]
                struct S {
                    a: Address,
                }
            ),
            quote!(
                #[serde(remote = "Other")]
                struct S {
                    a: Address,
                }
            ),
            quote!(
                #[serde(into = "Raw")]
                enum E {
                    A(Address),
                }
            ),
        ] {
            let out = expand_item(item);
            assert!(!out.contains("__HAIP_DATA"), "{out}");
        }
    }

    #[test]
    fn enum_variants_are_checked_and_each_type_is_asked_once() {
        let out = expand_item(quote! {
            enum Delivery { Pickup, Courier { note: Note }, Post(Note, Address), #[serde(skip)] Hidden(Secret) }
        });
        assert!(
            out.contains(
                "const __HAIP_DATA_Delivery : u8 = < Note as :: haip :: __private :: DataField > :: CHECKED \
                 + < Address as :: haip :: __private :: DataField > :: CHECKED ;"
            ),
            "{out}"
        );
        assert!(!out.contains("Secret as"), "{out}");
    }

    #[test]
    fn the_crate_option_names_the_paths() {
        let out = expand(
            quote!(crate = "my_haip"),
            quote!(
                struct S {
                    a: Address,
                }
            ),
        )
        .to_string();
        assert!(
            out.contains("< Address as my_haip :: __private :: DataField >"),
            "{out}"
        );
        assert!(
            out.contains("\"my_haip::__private::FieldsOk<{ __HAIP_DATA_S }>"),
            "{out}"
        );
    }

    #[test]
    fn not_a_struct_or_enum_is_passed_to_the_derives() {
        let out = expand_item(quote!(
            fn f() {}
        ));
        assert!(out.contains("fn f () { }"), "{out}");
        assert!(!out.contains("__HAIP_DATA"), "{out}");
    }
}
