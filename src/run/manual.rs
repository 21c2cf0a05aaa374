//! `gputop completions SHELL` and `gputop man`: shell completions and the manual page, made
//! from the same clap definition as `--help`, with the view's keys from the key map and the
//! commented default configuration.

use clap::CommandFactory;

use crate::cli::{Cli, EXIT_CODES};

/// The commented reference configuration, `config/default.toml`; equal to the built-in
/// defaults (a test checks). The program's, not the library's: the manual shows it, and the
/// library's package holds no file outside its own folder.
pub const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

/// The completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> String {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "gputop", &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The manual page, in roff: clap's sections, then the keys, the configuration and the exit
/// codes.
pub fn page() -> String {
    let command = Cli::command();
    let man = clap_mangen::Man::new(command.clone());
    let mut out = Vec::new();
    // Writing into memory cannot fail.
    let _ = man.render_title(&mut out);
    let _ = man.render_name_section(&mut out);
    let _ = man.render_description_section(&mut out);
    let _ = man.render_options_section(&mut out);
    let _ = man.render_subcommands_section(&mut out);
    let mut page = String::from_utf8_lossy(&out).into_owned();
    // The synopsis after the name, before the description.
    if let Some(at) = page.find(".SH DESCRIPTION") {
        page.insert_str(at, &synopsis(&command));
    }
    page.push_str(".SH KEYS\nIn the interactive view (h or F1 there shows every screen's keys):\n");
    for binding in crate::app::keymap::MAIN {
        page.push_str(&format!(
            ".TP\n\\fB{}\\fR\n{}\n",
            escape(&binding.label()),
            escape(binding.help)
        ));
    }
    page.push_str(".SH CONFIGURATION\n");
    page.push_str(
        "gputop reads $XDG_CONFIG_HOME/gputop/config.toml, else ~/.config/gputop/config.toml, \
         or the file named by \\fB\\-\\-config\\fR or GPUTOP_CONFIG; \\fBgputop \\-\\-dump\\-config\\fR \
         prints every effective setting and where it came from. The built-in defaults, with what \
         each key means:\n.PP\n.nf\n",
    );
    for line in DEFAULT_TOML.lines() {
        page.push_str(&escape(line));
        page.push('\n');
    }
    page.push_str(".fi\n.SH \"EXIT STATUS\"\n.nf\n");
    for line in EXIT_CODES.lines().skip(1) {
        page.push_str(&escape(line.trim_start()));
        page.push('\n');
    }
    page.push_str(".fi\n");
    let mut version = Vec::new();
    let _ = man.render_version_section(&mut version);
    page.push_str(&String::from_utf8_lossy(&version));
    page
}

/// The SYNOPSIS section: every option with the argument it takes (`--interval SECS`,
/// `--pid PID...`), then the subcommands.
fn synopsis(command: &clap::Command) -> String {
    let mut line = String::from(".SH SYNOPSIS\n\\fBgputop\\fR");
    for arg in command
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_positional())
    {
        let names: Vec<String> = arg
            .get_short()
            .map(|c| format!("\\fB\\-{c}\\fR"))
            .into_iter()
            .chain(arg.get_long().map(|l| format!("\\fB\\-\\-{}\\fR", escape(l))))
            .collect();
        let takes_value = arg.get_action().takes_values();
        let value = match arg.get_value_names() {
            Some(values) if takes_value => {
                let many = arg.get_num_args().is_some_and(|n| n.max_values() > 1);
                let value: Vec<String> = values.iter().map(|v| format!("\\fI{}\\fR", escape(v))).collect();
                format!(" {}{}", value.join(" "), if many { "..." } else { "" })
            }
            _ => String::new(),
        };
        line.push_str(&format!(" [{}{value}]", names.join("|")));
    }
    line.push_str(" [\\fISUBCOMMAND\\fR]\n");
    line
}

/// Text for roff: backslashes and hyphens escaped, and a line never starting a request.
fn escape(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roff_text_is_escaped() {
        assert_eq!(escape(".hidden -x \\n"), "\\&.hidden \\-x \\en");
        assert_eq!(escape("plain"), "plain");
    }

    /// Moved from the library's config module with the file it checks; assertions unchanged.
    #[test]
    fn default_toml_is_complete_and_equal_to_the_built_in_defaults() {
        use gputop_core::config::{CliOverrides, Origin, Settings, load};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("default.toml");
        std::fs::write(&path, DEFAULT_TOML).unwrap();
        let loaded =
            load(Some(&path), &|_| None, &CliOverrides::default()).expect("config/default.toml loads");
        assert_eq!(loaded.settings, Settings::default());
        for entry in &loaded.entries {
            assert!(
                matches!(entry.origin, Origin::File { .. }),
                "{} is missing from config/default.toml",
                entry.key.path()
            );
        }
    }
}
