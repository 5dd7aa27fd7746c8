//! `docs/reference/config.md`: every key of the serve config
//! (`airlock::config::Settings`) and of the mirror config
//! (`airlock::bundle::create::MirrorConfig`), read from the source of the
//! types themselves so it cannot drift: the field names and their serde
//! attributes are the keys, the doc comments the descriptions (and the
//! `[default: X]` or "Default `X`" they give the default), the types the
//! types; the flag and variable of a serve key come from clap.
//!
//! Parses every file under `src/` with `syn` and walks the struct types
//! from the two roots: a field whose type is a struct deriving
//! `Deserialize` is a table (`[store]`, `[[user]]`), any other field a key.
//! A leaf type this module has no name for fails the test, naming it.

use std::collections::BTreeMap;
use std::path::Path;

use syn::{Attribute, Fields, GenericArgument, Item, PathArguments, Type};

/// The config types found in `src/`: structs and enums deriving `Deserialize`.
struct Types {
    structs: BTreeMap<String, syn::ItemStruct>,
    enums: BTreeMap<String, syn::ItemEnum>,
    /// Names two files give to config types (a lookup by name would guess).
    twice: Vec<String>,
}

/// One key: its path, type, default, flag and description.
struct Row {
    key: String,
    ty: String,
    default: String,
    flag: String,
    doc: String,
}

/// The whole of `docs/reference/config.md`.
pub fn markdown(root: &Path, serve: &clap::Command) -> String {
    let types = Types::load(&root.join("src"));
    let mut out = String::from(
        "# Config reference\n\n\
         Generated from the config types in `src/` (their fields, doc comments and\n\
         serde attributes) by `UPDATE_DOCS=1 cargo test --release --bin airlock reference`;\n\
         do not edit by hand. The guides explain them in context: [the serve config\n\
         file](../users-and-tls.md#the-server-config-file), [the mirror\n\
         config](../import-and-media.md#mirror-config). Sizes take K, M, G, T\n\
         suffixes (powers of 1024).\n\n\
         ## Serve config\n\n\
         `airlock serve --config FILE` (TOML). A flag or its `AIRLOCK_*` variable\n\
         overrides the file's key; relative paths are resolved against the file's\n\
         directory; unknown keys are errors.\n",
    );
    types.section(&mut out, "Settings", "", "top level", Some(serve));
    out.push_str(
        "\n## Mirror config\n\n\
         `airlock bundle create --config FILE` (TOML): what a bundle carries.\n\
         Relative paths are resolved against the file's directory; unknown keys\n\
         are errors.\n",
    );
    types.section(&mut out, "MirrorConfig", "", "top level", None);
    out
}

impl Types {
    fn load(dir: &Path) -> Types {
        let mut types = Types {
            structs: BTreeMap::new(),
            enums: BTreeMap::new(),
            twice: Vec::new(),
        };
        let mut files = vec![dir.to_path_buf()];
        while let Some(path) = files.pop() {
            if path.is_dir() {
                for entry in std::fs::read_dir(&path).unwrap() {
                    files.push(entry.unwrap().path());
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            for item in file.items {
                match item {
                    Item::Struct(s) if derives(&s.attrs, "Deserialize") => {
                        if let Some(old) = types.structs.insert(s.ident.to_string(), s) {
                            types.twice.push(old.ident.to_string());
                        }
                    }
                    Item::Enum(e) if derives(&e.attrs, "Deserialize") => {
                        if let Some(old) = types.enums.insert(e.ident.to_string(), e) {
                            types.twice.push(old.ident.to_string());
                        }
                    }
                    _ => {}
                }
            }
        }
        types
    }

    /// Writes the keys of struct `name` (the table `heading`, its keys'
    /// paths starting with `prefix`), then its sub-tables.
    fn section(
        &self,
        out: &mut String,
        name: &str,
        prefix: &str,
        heading: &str,
        serve: Option<&clap::Command>,
    ) {
        let item = &self.structs[name];
        let Fields::Named(fields) = &item.fields else {
            panic!("{name}: a config table must have named fields")
        };
        let mut rows = Vec::new();
        let mut tables = Vec::new();
        for field in &fields.named {
            let serde = serde_attrs(&field.attrs);
            let ident = field.ident.as_ref().unwrap().to_string();
            let flag_only = serde.contains_key("skip");
            if flag_only && (serve.is_none() || arg_skipped(&field.attrs)) {
                continue;
            }
            let key = serde
                .get("rename")
                .cloned()
                .unwrap_or_else(|| ident.clone());
            let (ty, optional) = unwrap_generic(&field.ty, "Option");
            let (elem, many) = unwrap_generic(ty, "Vec");
            if let Some(inner) = self.struct_name(elem) {
                let heading = if many {
                    format!("`[[{prefix}{key}]]`")
                } else {
                    format!("`[{prefix}{key}]`")
                };
                tables.push((heading, inner, format!("{prefix}{key}.")));
                continue;
            }
            let doc = doc_text(&field.attrs);
            let (doc, documented) = split_default(&doc);
            let default = documented.unwrap_or_else(|| {
                if optional || serde.contains_key("default") {
                    "none".into()
                } else {
                    "required".into()
                }
            });
            let flag = match serve {
                None => None,
                Some(_) if !derives(&item.attrs, "Args") => Some("file only".into()),
                Some(cmd) => Some(flag_of(cmd, &ident, &field.attrs)),
            };
            rows.push(Row {
                key: if flag_only {
                    "(flag only)".into()
                } else {
                    format!("`{prefix}{key}`")
                },
                ty: self.type_name(ty),
                default,
                flag: flag.unwrap_or_default(),
                doc,
            });
        }
        if !rows.is_empty() {
            out.push_str(&format!("\n### {heading}\n\n"));
            let doc = doc_text(&item.attrs);
            let first = doc.split(". ").next().unwrap_or("");
            out.push_str(&format!(
                "{}.\n\n",
                escape(first.trim_end_matches(['.', ':']))
            ));
            write_rows(out, &rows, serve.is_some());
        }
        for (heading, inner, sub) in tables {
            self.section(out, &inner, &sub, &heading, serve);
        }
    }

    /// The config struct a type names (`StoreSection`, `UserEntry`), if any.
    fn struct_name(&self, ty: &Type) -> Option<String> {
        let name = last_ident(ty)?;
        assert!(
            !self.twice.contains(&name),
            "two config types are named {name}: rename one (src/cli/reference/config.rs looks types up by name)"
        );
        self.structs
            .get(&name)
            .filter(|s| matches!(s.fields, Fields::Named(_)))
            .map(|_| name)
    }

    /// A reader's name for a leaf type; an enum lists its values.
    fn type_name(&self, ty: &Type) -> String {
        let (elem, many) = unwrap_generic(ty, "Vec");
        if many {
            return format!("array of {}", self.type_name(elem));
        }
        let (value, map) = unwrap_map(ty);
        if map {
            return format!("table of {}", self.type_name(value));
        }
        let name = last_ident(ty).unwrap_or_default();
        assert!(
            !self.twice.contains(&name),
            "two config types are named {name}"
        );
        if let Some(e) = self.enums.get(&name) {
            return enum_values(e);
        }
        match name.as_str() {
            "String" => "string",
            "bool" => "boolean",
            "u64" | "usize" | "u8" => "integer",
            "NonZeroU64" => "integer ≥ 1",
            "PathBuf" => "path",
            "SocketAddr" => "address (`IP:PORT`)",
            "Size" => "size (bytes, or K/M/G/T)",
            "RepositoryName" => "repository name",
            "Tag" => "tag",
            "StackName" => "stack name (`[a-z0-9._-]`, 1-128)",
            other => panic!(
                "config type {other} has no name in src/cli/reference/config.rs: add one to type_name"
            ),
        }
        .to_string()
    }
}

fn write_rows(out: &mut String, rows: &[Row], with_flag: bool) {
    if with_flag {
        out.push_str("| key | type | default | flag (variable) | description |\n");
        out.push_str("| --- | --- | --- | --- | --- |\n");
    } else {
        out.push_str("| key | type | default | description |\n| --- | --- | --- | --- |\n");
    }
    for r in rows {
        let flag = if with_flag {
            format!(" {} |", escape(&r.flag))
        } else {
            String::new()
        };
        out.push_str(&format!(
            "| {} | {} | {} |{flag} {} |\n",
            r.key,
            escape(&r.ty),
            escape(&r.default),
            escape(&r.doc)
        ));
    }
}

/// `--flag` (`AIRLOCK_VAR`) of a serve key, from clap; "file only" for a
/// field clap skips. A field clap should know but does not fails the test.
fn flag_of(serve: &clap::Command, ident: &str, attrs: &[Attribute]) -> String {
    if arg_skipped(attrs) {
        return "file only".into();
    }
    let id = arg_id(attrs).unwrap_or_else(|| ident.to_string());
    let arg = serve
        .get_arguments()
        .find(|a| a.get_id() == id.as_str())
        .unwrap_or_else(|| panic!("serve config field {ident} is no `airlock serve` argument"));
    let long = arg
        .get_long()
        .map(|l| format!("`--{l}`"))
        .unwrap_or_default();
    match arg.get_env() {
        Some(env) => format!("{long} (`{}`)", env.to_string_lossy()),
        None => long,
    }
}

/// `#[arg(skip)]`: a field clap does not parse.
/// The `id = "..."` of `#[arg(...)]`, when the field names its argument
/// (two sections' fields of one name need distinct ids).
fn arg_id(attrs: &[Attribute]) -> Option<String> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("arg"))
        .find_map(|a| {
            let mut id = None;
            let _ = a.parse_nested_meta(|m| {
                if m.path.is_ident("id") {
                    id = Some(m.value()?.parse::<syn::LitStr>()?.value());
                } else if m.input.peek(syn::Token![=]) {
                    let _: syn::Expr = m.value()?.parse()?;
                }
                Ok(())
            });
            id
        })
}

fn arg_skipped(attrs: &[Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("arg") && attr_words(a).iter().any(|w| w == "skip"))
}

/// `#[derive(.., trait_name, ..)]` (by the path's last segment).
fn derives(attrs: &[Attribute], trait_name: &str) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("derive") && attr_words(a).iter().any(|w| w == trait_name))
}

/// The identifiers inside `#[x(...)]` (paths by their last segment).
fn attr_words(attr: &Attribute) -> Vec<String> {
    let mut words = Vec::new();
    let _ = attr.parse_nested_meta(|meta| {
        if let Some(last) = meta.path.segments.last() {
            words.push(last.ident.to_string());
        }
        if meta.input.peek(syn::Token![=]) {
            let _: syn::Expr = meta.value()?.parse()?;
        } else if meta.input.peek(syn::token::Paren) {
            meta.parse_nested_meta(|_| Ok(()))?;
        }
        Ok(())
    });
    words
}

/// `#[serde(...)]` entries: name → string value ("" for a bare word).
fn serde_attrs(attrs: &[Attribute]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _ = attr.parse_nested_meta(|meta| {
            let name = meta
                .path
                .get_ident()
                .map(ToString::to_string)
                .unwrap_or_default();
            let value = if meta.input.peek(syn::Token![=]) {
                match meta.value()?.parse::<syn::Expr>()? {
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) => s.value(),
                    _ => String::new(),
                }
            } else {
                String::new()
            };
            out.insert(name, value);
            Ok(())
        });
    }
    out
}

/// The doc comment as one paragraph, intra-doc link brackets dropped.
fn doc_text(attrs: &[Attribute]) -> String {
    let mut lines = Vec::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("doc")) {
        if let syn::Meta::NameValue(nv) = &attr.meta
            && let syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) = &nv.value
        {
            lines.push(s.value().trim().to_string());
        }
    }
    // Stop at a code example: the first paragraph (and lists) is the doc.
    let text = lines
        .iter()
        .take_while(|l| !l.starts_with("```"))
        .cloned()
        .collect::<Vec<_>>()
        .join(" ");
    text.replace("[`", "`")
        .replace("`]", "`")
        .trim()
        .to_string()
}

/// The description without its `[default: X]`, and the default (`X`, or
/// the `X` of "Default `X`").
fn split_default(doc: &str) -> (String, Option<String>) {
    if let Some(start) = doc.find("[default: ") {
        let rest = &doc[start + "[default: ".len()..];
        if let Some(end) = rest.find(']') {
            let desc = format!("{}{}", &doc[..start], &rest[end + 1..]);
            let desc = desc.trim().trim_end_matches(['.', ' ']).to_string() + ".";
            let value = &rest[..end];
            let value = if value.contains(' ') {
                value.to_string()
            } else {
                format!("`{value}`")
            };
            return (desc.replace(" .", "."), Some(value));
        }
    }
    let default = doc.find("Default `").and_then(|start| {
        let rest = &doc[start + "Default `".len()..];
        rest.find('`').map(|end| format!("`{}`", &rest[..end]))
    });
    (doc.to_string(), default)
}

fn enum_values(e: &syn::ItemEnum) -> String {
    let rule = serde_attrs(&e.attrs)
        .get("rename_all")
        .cloned()
        .unwrap_or_default();
    let values: Vec<String> = e
        .variants
        .iter()
        .map(|v| {
            if let Some(r) = serde_attrs(&v.attrs).get("rename") {
                return format!("`{r}`");
            }
            let name = v.ident.to_string();
            let words = split_camel(&name);
            let value = match rule.as_str() {
                "lowercase" => name.to_lowercase(),
                "kebab-case" => words.join("-"),
                "snake_case" => words.join("_"),
                "" => name,
                other => panic!("{}: rename_all = {other:?} not rendered", e.ident),
            };
            format!("`{value}`")
        })
        .collect();
    values.join(" | ")
}

fn split_camel(name: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for c in name.chars() {
        if c.is_uppercase() || words.is_empty() {
            words.push(String::new());
        }
        words.last_mut().unwrap().extend(c.to_lowercase());
    }
    words
}

/// `T` of `wrapper<T>` and true, or `ty` and false.
fn unwrap_generic<'a>(ty: &'a Type, wrapper: &str) -> (&'a Type, bool) {
    if let Type::Path(p) = ty
        && let Some(last) = p.path.segments.last()
        && last.ident == wrapper
        && let PathArguments::AngleBracketed(args) = &last.arguments
        && let Some(GenericArgument::Type(inner)) = args.args.first()
    {
        return (inner, true);
    }
    (ty, false)
}

/// The value type of a `BTreeMap<K, V>` / `HashMap<K, V>`.
fn unwrap_map(ty: &Type) -> (&Type, bool) {
    if let Type::Path(p) = ty
        && let Some(last) = p.path.segments.last()
        && (last.ident == "BTreeMap" || last.ident == "HashMap")
        && let PathArguments::AngleBracketed(args) = &last.arguments
        && let Some(GenericArgument::Type(value)) = args.args.iter().nth(1)
    {
        return (value, true);
    }
    (ty, false)
}

fn last_ident(ty: &Type) -> Option<String> {
    match ty {
        Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

/// A table cell: `|` escaped, no line breaks, and outside code spans `<`
/// and `>` as entities (`<name>` would be an HTML tag).
fn escape(text: &str) -> String {
    let mut out = String::new();
    let mut code = false;
    for c in text.chars() {
        match c {
            '`' => {
                code = !code;
                out.push(c);
            }
            '|' => out.push_str("\\|"),
            '\n' => out.push(' '),
            '<' if !code => out.push_str("&lt;"),
            '>' if !code => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}
