//! The files a DRM reader read, kept for `gputop capture` and served again to a test: each
//! file's text at the first and at the last read, the links and the directory listings.
//! What is kept of `/proc` is only what concerns the GPUs (the links of DRM fds and their
//! fdinfo): a capture never carries the paths of a user's other open files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::Files;

/// At most this many bytes of file text are kept: a capture stays a small file.
const MAX_BYTES: usize = 4 << 20;

/// The captured files of both trees.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Captured {
    /// Seconds between the first and the last read.
    #[serde(default)]
    pub seconds: f64,
    /// Under the sysfs root.
    #[serde(default)]
    pub sys: Tree,
    /// Under the procfs root.
    #[serde(default)]
    pub proc: Tree,
}

/// One tree's captured files, by path relative to its root.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tree {
    /// Each file's text at the first read and at the last.
    #[serde(default)]
    pub files: BTreeMap<String, [String; 2]>,
    /// Where each link points.
    #[serde(default)]
    pub links: BTreeMap<String, String>,
    /// Each directory's names.
    #[serde(default)]
    pub dirs: BTreeMap<String, Vec<String>>,
}

impl Captured {
    /// What of `/proc` concerns the GPUs: the processes holding DRM fds, those fds' links and
    /// fdinfo; `sys` whole.
    pub fn for_report(&self) -> Self {
        let drm_fds: BTreeMap<&str, &String> = self
            .proc
            .links
            .iter()
            .filter(|(path, target)| path.contains("/fd/") && target.starts_with("/dev/dri/"))
            .map(|(path, target)| (path.as_str(), target))
            .collect();
        let held = |path: &str| {
            let (pid, fd) = path.split_once("/fd/")?;
            Some((pid.to_string(), fd.to_string()))
        };
        let kept: Vec<(String, String)> = drm_fds.keys().filter_map(|p| held(p)).collect();
        let mut proc = Tree::default();
        for (pid, fd) in &kept {
            let link = format!("{pid}/fd/{fd}");
            proc.links.insert(link.clone(), drm_fds[link.as_str()].clone());
            let info = format!("{pid}/fdinfo/{fd}");
            if let Some(text) = self.proc.files.get(&info) {
                proc.files.insert(info, text.clone());
            }
            proc.dirs.entry(format!("{pid}/fd")).or_default().push(fd.clone());
            let pids = proc.dirs.entry(String::new()).or_default();
            if !pids.contains(pid) {
                pids.push(pid.clone());
            }
        }
        Self {
            seconds: self.seconds,
            sys: self.sys.clone(),
            proc,
        }
    }

    /// The trees served as files: their first texts, or their last once `later` is set.
    pub fn serve(&self, later: Arc<AtomicBool>) -> (Served, Served) {
        (
            Served {
                tree: self.proc.clone(),
                later: Arc::clone(&later),
            },
            Served {
                tree: self.sys.clone(),
                later,
            },
        )
    }
}

/// A captured tree read as files.
#[derive(Debug)]
pub struct Served {
    tree: Tree,
    later: Arc<AtomicBool>,
}

fn not_found() -> std::io::Error {
    std::io::ErrorKind::NotFound.into()
}

/// A path as the trees key it: relative, `/`-separated, `""` for the root.
fn key(path: &Path) -> String {
    let text = path.to_string_lossy();
    text.trim_start_matches("./").trim_end_matches('/').to_string()
}

impl Files for Served {
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        self.tree.dirs.get(&key(dir)).cloned().ok_or_else(not_found)
    }

    fn link(&self, path: &Path) -> std::io::Result<PathBuf> {
        self.tree
            .links
            .get(&key(path))
            .map(PathBuf::from)
            .ok_or_else(not_found)
    }

    fn read(&self, path: &Path, max: usize) -> std::io::Result<Vec<u8>> {
        let [first, last] = self.tree.files.get(&key(path)).ok_or_else(not_found)?;
        let text = if self.later.load(Ordering::SeqCst) {
            last
        } else {
            first
        };
        let mut bytes = text.clone().into_bytes();
        bytes.truncate(max);
        Ok(bytes)
    }
}

/// Which tree a recorder keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// The procfs root's.
    Proc,
    /// The sysfs root's.
    Sys,
}

/// Files that keep what is read through them in a shared [`Captured`].
pub struct Recorder {
    inner: Box<dyn Files + Send>,
    which: Which,
    log: Arc<Mutex<(Captured, usize)>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("which", &self.which)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// Records what is read through `inner` (the `which` tree) into `log` (the capture and
    /// the bytes it holds).
    pub fn new(inner: Box<dyn Files + Send>, which: Which, log: Arc<Mutex<(Captured, usize)>>) -> Self {
        Self { inner, which, log }
    }

    fn keep(&self, change: impl FnOnce(&mut Tree, &mut usize)) {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let (captured, bytes) = &mut *log;
        let tree = match self.which {
            Which::Proc => &mut captured.proc,
            Which::Sys => &mut captured.sys,
        };
        change(tree, bytes);
    }
}

impl Files for Recorder {
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        let names = self.inner.list(dir)?;
        self.keep(|tree, _| {
            tree.dirs.insert(key(dir), names.clone());
        });
        Ok(names)
    }

    fn link(&self, path: &Path) -> std::io::Result<PathBuf> {
        let target = self.inner.link(path)?;
        self.keep(|tree, _| {
            tree.links
                .insert(key(path), target.to_string_lossy().into_owned());
        });
        Ok(target)
    }

    fn read(&self, path: &Path, max: usize) -> std::io::Result<Vec<u8>> {
        let bytes = self.inner.read(path, max)?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        self.keep(|tree, held| match tree.files.get_mut(&key(path)) {
            Some([_, last]) => {
                *held = (*held + text.len()).saturating_sub(last.len());
                *last = text;
            }
            None if *held + 2 * text.len() <= MAX_BYTES => {
                *held += 2 * text.len();
                tree.files.insert(key(path), [text.clone(), text]);
            }
            None => {}
        });
        Ok(bytes)
    }
}
