//! `#[derive(Differentiable)]` for optic-ad.
//!
//! Use it through the main crate, which re-exports it under its default
//! `derive` feature: `use optic_ad::Differentiable;`. The documentation of
//! the trait and of the generated code is optic-ad's `differentiable`
//! module.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote, ToTokens};
use syn::{parse_macro_input, Data, DeriveInput, Fields, GenericParam, Index};

/// Derives `optic_ad::Differentiable`, `optic_ad::Rebuild` and
/// `optic_ad::Point` for a struct generic over its scalar type.
///
/// The struct has exactly one type parameter, the scalar (no lifetimes or
/// const parameters), and named or tuple fields. Every field is a
/// differentiable value of that scalar (`T`, `Vec<T>`, `[T; N]`, another
/// derived struct, …) unless it is marked `#[differentiable(skip)]`: then it
/// is data, it has no tangent, and it is cloned from the point into every
/// value rebuilt from it (a gradient keeps the point's data), so its type
/// must not mention the scalar type, and it must be `Clone` and
/// `PartialEq` (the compiled drivers trace again where it changes). The
/// scalar parameter may be bounded by `Real` and nothing else.
#[proc_macro_derive(Differentiable, attributes(differentiable))]
pub fn derive_differentiable(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// One field: how to name it on a value, whether it is data, its name in
/// leaf paths.
struct Field {
    member: TokenStream2,
    ty: syn::Type,
    skip: bool,
    label: String,
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let name = &input.ident;
    let scalar = scalar_param(input)?;
    let data = match &input.data {
        Data::Struct(s) => s,
        _ => {
            return Err(syn::Error::new_spanned(
                name,
                "Differentiable can be derived for structs only",
            ))
        }
    };
    let fields = fields(&data.fields)?;
    // The rebind parameter: any name but the scalar's.
    let u = if scalar == "__OpticAdU" {
        format_ident!("__OpticAdV")
    } else {
        format_ident!("__OpticAdU")
    };
    let krate = quote!(::optic_ad);

    let live: Vec<&Field> = fields.iter().filter(|f| !f.skip).collect();
    let flatten = live.iter().map(|f| {
        let m = &f.member;
        quote!(#krate::Differentiable::flatten_into(&self.#m, leaves);)
    });
    let count = live.iter().map(|f| {
        let m = &f.member;
        quote!(+ #krate::Differentiable::leaf_count(&self.#m))
    });
    let shape = live.iter().map(|f| {
        let m = &f.member;
        quote!(&& #krate::Differentiable::same_shape(&self.#m, &other.#m))
    });
    let names = live.iter().map(|f| {
        let m = &f.member;
        let label = &f.label;
        quote!(#krate::Differentiable::leaf_names(
            &self.#m,
            &#krate::differentiable::field_path(path, #label),
            names,
        );)
    });
    let any_skip = fields.iter().any(|f| f.skip);
    let has_data = live.iter().map(|f| {
        let ty = &f.ty;
        quote!(|| <#ty as #krate::Differentiable>::HAS_DATA)
    });
    let same_data = fields.iter().map(|f| {
        let m = &f.member;
        if f.skip {
            quote!(&& self.#m == other.#m)
        } else {
            quote!(&& #krate::Differentiable::same_data(&self.#m, &other.#m))
        }
    });
    let rebuilt = fields.iter().map(|f| {
        let m = &f.member;
        if f.skip {
            quote!(#m: ::core::clone::Clone::clone(&template.#m))
        } else {
            quote!(#m: #krate::Rebuild::rebuild(&template.#m, leaves)?)
        }
    });

    Ok(quote! {
        #[automatically_derived]
        impl<#scalar: #krate::Real> #krate::Differentiable for #name<#scalar> {
            type Scalar = #scalar;
            type Rebind<#u: #krate::Real> = #name<#u>;
            fn flatten_into(&self, leaves: &mut ::std::vec::Vec<#scalar>) {
                #(#flatten)*
            }
            fn leaf_count(&self) -> ::core::primitive::usize {
                0 #(#count)*
            }
            fn same_shape(&self, other: &Self) -> ::core::primitive::bool {
                true #(#shape)*
            }
            const HAS_DATA: ::core::primitive::bool = #any_skip #(#has_data)*;
            fn same_data(&self, other: &Self) -> ::core::primitive::bool {
                true #(#same_data)*
            }
            fn leaf_names(
                &self,
                path: &::core::primitive::str,
                names: &mut ::std::vec::Vec<::std::string::String>,
            ) {
                #(#names)*
            }
        }

        #[automatically_derived]
        impl<#scalar: #krate::Real, #u: #krate::Real> #krate::Rebuild<#name<#scalar>> for #name<#u> {
            fn rebuild(
                template: &#name<#scalar>,
                leaves: &mut #krate::Leaves<'_, #u>,
            ) -> ::core::option::Option<Self> {
                ::core::option::Option::Some(#name { #(#rebuilt),* })
            }
        }

        #[automatically_derived]
        impl<#scalar: #krate::Real> #krate::Point for #name<#scalar> {
            #krate::structured_point!();
        }
    })
}

/// The struct's one type parameter, its scalar. Its only bound may be
/// `Real` (the derived impls require that bound anyway); other bounds and
/// where clauses are refused, since the impls rebuild the struct at other
/// scalar types, where they need not hold.
fn scalar_param(input: &DeriveInput) -> syn::Result<syn::Ident> {
    if let Some(w) = &input.generics.where_clause {
        return Err(syn::Error::new_spanned(
            w,
            "Differentiable: a where clause is not supported; the scalar parameter may only be \
             bounded by `Real` (put other bounds on the functions that need them)",
        ));
    }
    let mut scalar = None;
    for p in &input.generics.params {
        match p {
            GenericParam::Type(t) if scalar.is_none() => {
                for b in &t.bounds {
                    let is_real = matches!(
                        b,
                        syn::TypeParamBound::Trait(tb)
                            if tb.path.segments.last().is_some_and(|s| s.ident == "Real")
                    );
                    if !is_real {
                        return Err(syn::Error::new_spanned(
                            b,
                            "Differentiable: the scalar parameter may only be bounded by `Real` \
                             (put other bounds on the functions that need them)",
                        ));
                    }
                }
                scalar = Some(t.ident.clone());
            }
            other => {
                return Err(syn::Error::new_spanned(
                    other,
                    "Differentiable: the struct must have exactly one generic parameter, \
                     its scalar type (as in `struct Params<T> { .. }`)",
                ))
            }
        }
    }
    scalar.ok_or_else(|| {
        syn::Error::new_spanned(
            &input.ident,
            "Differentiable: the struct must be generic over its scalar type \
             (as in `struct Params<T> { w: Vec<T>, b: T }`)",
        )
    })
}

fn fields(fields: &Fields) -> syn::Result<Vec<Field>> {
    let mut out = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        let mut skip = false;
        for attr in &f.attrs {
            if attr.path().is_ident("differentiable") {
                attr.parse_nested_meta(|meta| {
                    if meta.path.is_ident("skip") {
                        skip = true;
                        Ok(())
                    } else {
                        Err(meta.error("expected `skip`"))
                    }
                })?;
            }
        }
        let (member, label) = match &f.ident {
            Some(id) => (id.to_token_stream(), id.to_string()),
            None => {
                let index = Index {
                    index: i as u32,
                    span: Span::call_site(),
                };
                (index.to_token_stream(), i.to_string())
            }
        };
        out.push(Field {
            member,
            ty: f.ty.clone(),
            skip,
            label,
        });
    }
    Ok(out)
}
