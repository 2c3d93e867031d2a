//! Programs the tests run that come from the system's packages (Debian's
//! `redis-server`, `prometheus`): taken from an environment variable naming
//! the binary, else from `PATH` (or `/usr/bin`, `/usr/sbin`); when there is
//! none, installed with `apt-get update && apt-get install -y <package>`,
//! once per machine under a lock file in `target/`. When that is impossible
//! the test fails saying how to install it: a test that needs a program
//! never skips silently.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// A program a test needs.
pub(crate) struct Program {
    /// The binary's name (`redis-server`).
    pub(crate) binary: &'static str,
    /// The Debian package that has it.
    pub(crate) package: &'static str,
    /// The environment variable that may name the binary instead.
    pub(crate) env: &'static str,
}

impl Program {
    /// The program's path: from [`Program::env`], on `PATH`, or installed now.
    pub(crate) fn path(&self) -> PathBuf {
        if let Some(path) = std::env::var_os(self.env) {
            let path = PathBuf::from(path);
            assert!(
                runs(&path),
                "{}={} does not run (`--version` failed)",
                self.env,
                path.display()
            );
            return path;
        }
        self.find().unwrap_or_else(|| self.install())
    }

    /// On `PATH`, or in Debian's usual places (`PATH` may lack `/usr/sbin`),
    /// if it runs.
    fn find(&self) -> Option<PathBuf> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
            .map(|dir| dir.join(self.binary))
            .find(|candidate| candidate.is_file() && runs(candidate))
    }

    /// Installs the package with apt-get, holding `target/<package>-install.lock`
    /// so that test binaries running at once install it once; panics, with
    /// apt-get's output, when that fails.
    fn install(&self) -> PathBuf {
        let (binary, package) = (self.binary, self.package);
        let target = workspace().join("target");
        std::fs::create_dir_all(&target)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", target.display()));
        let lock_path = target.join(format!("{package}-install.lock"));
        let lock = std::fs::File::create(&lock_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", lock_path.display()));
        lock.lock()
            .unwrap_or_else(|e| panic!("cannot lock {}: {e}", lock_path.display()));
        // Another test binary may have installed it while we waited.
        if let Some(found) = self.find() {
            return found;
        }
        let how = format!(
            "install it (Debian: `apt-get install {package}`), put `{binary}` on PATH, or point \
             {} at it",
            self.env
        );
        let started = Instant::now();
        eprintln!(
            "{binary} is not installed: installing {package} with apt-get (once per machine)"
        );
        for args in [
            &["update"][..],
            &["install", "-y", "--no-install-recommends", package][..],
        ] {
            let out = Command::new("apt-get")
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| {
                    panic!("this test needs {binary} and cannot run apt-get ({e}): {how}")
                });
            assert!(
                out.status.success(),
                "this test needs {binary}, and `apt-get {}` failed ({}): {how}\n\
                 --- stdout\n{}\n--- stderr\n{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
        }
        drop(lock);
        let found = self.find().unwrap_or_else(|| {
            panic!("apt-get installed {package}, yet no runnable `{binary}` is found: {how}")
        });
        eprintln!("installed {} in {:.1?}", found.display(), started.elapsed());
        found
    }
}

fn runs(binary: &Path) -> bool {
    Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|out| out.status.success())
}

/// The workspace's root.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}
