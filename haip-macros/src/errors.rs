//! The error collector every phase writes to: mistakes are gathered, not
//! returned one at a time, so one build reports all of them.

/// Collected errors, combined into one `compile_error!` stream at the end.
#[derive(Default)]
pub(crate) struct Errors {
    errors: Vec<syn::Error>,
}

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        self.errors.push(error);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub(crate) fn into_vec(self) -> Vec<syn::Error> {
        self.errors
    }

    pub(crate) fn to_compile_errors(&self) -> proc_macro2::TokenStream {
        self.errors
            .iter()
            .map(syn::Error::to_compile_error)
            .collect()
    }

    #[cfg(test)]
    pub(crate) fn messages(&self) -> Vec<String> {
        self.errors.iter().map(ToString::to_string).collect()
    }
}
