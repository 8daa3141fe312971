//! Env var naming, bit-compatible with Reloader's `ConvertToEnvVarName`.

use crate::model::ConfigKind;

/// Upper-case, keep `[A-Z0-9]`, replace each run of other bytes that follows a kept byte with one
/// `_` (leading junk dropped, trailing junk leaves a trailing `_`).
pub fn env_var_fragment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut last_kept = false;
    for b in name.bytes() {
        let up = b.to_ascii_uppercase();
        if up.is_ascii_uppercase() || up.is_ascii_digit() {
            out.push(up as char);
            last_kept = true;
        } else {
            if last_kept {
                out.push('_');
            }
            last_kept = false;
        }
    }
    out
}

/// `STAKATER_<NAME>_<TYPE>`.
pub fn reload_env_var(kind: ConfigKind, name: &str) -> String {
    format!("STAKATER_{}_{}", env_var_fragment(name), kind.env_suffix())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_examples() {
        assert_eq!(
            reload_env_var(ConfigKind::ConfigMap, "my-app.config"),
            "STAKATER_MY_APP_CONFIG_CONFIGMAP"
        );
        assert_eq!(env_var_fragment("--a..b--"), "A_B_");
        assert_eq!(env_var_fragment("x"), "X");
        assert_eq!(
            reload_env_var(ConfigKind::Secret, "db-creds"),
            "STAKATER_DB_CREDS_SECRET"
        );
        assert_eq!(
            reload_env_var(ConfigKind::SecretProviderClass, "vault"),
            "STAKATER_VAULT_SECRETPROVIDERCLASS"
        );
    }

    proptest::proptest! {
        /// Whatever the name: only `[A-Z0-9_]`, never a leading `_`, never two `_` in a row,
        /// and the kept characters are the name's alphanumerics, upper-cased, in order.
        #[test]
        fn fragments_are_valid_env_var_text(name in "\\PC{0,40}") {
            let f = env_var_fragment(&name);
            proptest::prop_assert!(f.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'));
            proptest::prop_assert!(!f.starts_with('_'));
            proptest::prop_assert!(!f.contains("__"));
            let kept: String = name
                .bytes()
                .filter(u8::is_ascii_alphanumeric)
                .map(|b| b.to_ascii_uppercase() as char)
                .collect();
            proptest::prop_assert_eq!(f.replace('_', ""), kept);
        }
    }
}
