//! Any text given to the condition DSL compiles or fails with errors whose ranges lie inside the
//! text; what compiles renders to a canonical form that compiles to the same JSON-Logic, and its
//! JSON-Logic renders back to that canonical form.
#![no_main]

use flexrun_conditions::dsl::{self, Catalog, Scope};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else { return };
    let catalog = Catalog::builtin();
    let length = source.chars().count();
    for scope in [Scope::Catalog, Scope::Relative { schema: None }] {
        match dsl::compile(source, &catalog, scope) {
            Ok(compiled) => {
                let again = dsl::compile(&compiled.canonical_dsl, &catalog, scope).expect("canonical form compiles");
                assert_eq!(again.json_logic, compiled.json_logic, "canonical form means the same");
                let rendered = dsl::from_json_logic(&compiled.json_logic, &catalog).expect("JSON-Logic renders back");
                assert_eq!(rendered, compiled.canonical_dsl, "rendering the JSON-Logic gives the canonical form");
            }
            Err(errors) => {
                assert!(!errors.is_empty());
                for error in errors {
                    assert!(error.range.start.offset <= error.range.end.offset);
                    assert!(error.range.end.offset <= length, "range inside the text");
                }
            }
        }
    }
});
