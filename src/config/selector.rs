//! Reloader's selector flags: a list of `k:v`, `k:*`, `k=v` or set-based terms, turned into one
//! Kubernetes label selector string.

/// Splits on commas outside parentheses, so `env in (a,b)` stays one term.
fn split_terms(s: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&s[start..]);
    terms
}

/// `None` when nothing is selected (all namespaces / resources).
pub fn reloader_selector_to_label_selector(values: &[String]) -> Result<Option<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for value in values {
        // Reloader's chart renders `--namespace-selector="k=v, k2 in (a,b)"`: its flag library
        // reads the value as CSV, which drops the quotes. Labels cannot contain `"` anyway.
        let value = value.replace('"', "");
        if value.matches('(').count() != value.matches(')').count() {
            return Err(format!("unbalanced parentheses in '{value}'"));
        }
        for term in split_terms(&value) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let converted =
                if term.contains(" in ") || term.contains(" notin ") || term.contains('=') {
                    term.to_string()
                } else if let Some((k, v)) = term.split_once(':') {
                    let (k, v) = (k.trim(), v.trim());
                    if k.is_empty() {
                        return Err(format!("'{term}' has an empty key"));
                    }
                    if v == "*" {
                        k.to_string()
                    } else {
                        format!("{k}={v}")
                    }
                } else {
                    // A bare key (or `!key`) is an existence test, as in label selectors.
                    term.to_string()
                };
            out.push(converted);
        }
    }
    Ok((!out.is_empty()).then(|| out.join(",")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(v: &[&str]) -> Option<String> {
        reloader_selector_to_label_selector(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap()
    }

    #[test]
    fn converts_reloader_forms() {
        assert_eq!(sel(&[]), None);
        assert_eq!(sel(&["team:a"]), Some("team=a".into()));
        assert_eq!(sel(&["team:*"]), Some("team".into()));
        assert_eq!(sel(&["k=v,k2 in (a,b)"]), Some("k=v,k2 in (a,b)".into()));
        assert_eq!(sel(&["a:1", "b:2"]), Some("a=1,b=2".into()));
        // As Reloader's chart quotes it.
        assert_eq!(
            sel(&["\"team=a, env in (prod,stage)\""]),
            Some("team=a,env in (prod,stage)".into())
        );
    }

    #[test]
    fn rejects_unbalanced() {
        assert!(reloader_selector_to_label_selector(&["k in (a,b".into()]).is_err());
    }
}
