//! Where the repository is: the load test runs the scripts under `hack/`.

use std::path::{Path, PathBuf};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("loadtest/ is inside the repository")
        .to_path_buf()
}
