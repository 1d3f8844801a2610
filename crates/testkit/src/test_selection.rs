//! Which tests a harness of its own (`harness = false`) runs, read from its command line as
//! libtest reads it, so that `cargo test -- FILTER --skip NAME --exact` means the same to the
//! GPU tests and the fuzz targets as to every other test binary of the workspace.
//!
//! `libtest-mimic`'s `Arguments` parses the same command line but takes one name filter; libtest
//! takes several, and the device scripts pass several (`scripts/gpu-run-remote.sh`).

/// libtest's options that take a value, given as `--option VALUE` or `--option=VALUE`: the
/// value is not a name filter (`--skip` is read on its own).
const OPTIONS_WITH_VALUE: &[&str] = &[
    "--test-threads",
    "--logfile",
    "--format",
    "--color",
    "--shuffle-seed",
    "-Z",
];

/// The tests a command line selects, as libtest selects them: a test runs when its name
/// contains one of the name filters (or there are none) and none of the `--skip` patterns;
/// under `--exact` both match whole names only. `--list` asks for the selected names instead of
/// a run. libtest's other options are accepted and ignored, their values too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TestSelection {
    filters: Vec<String>,
    skips: Vec<String>,
    exact: bool,
    list: bool,
}

impl TestSelection {
    /// The selection of this process's command line (its arguments after the program name).
    pub fn from_env() -> Self {
        Self::parse(std::env::args().skip(1))
    }

    /// The selection of `args` (the arguments after the program name).
    pub fn parse<I>(args: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let mut selection = Self::default();
        let mut args = args.into_iter().map(Into::into);
        while let Some(arg) = args.next() {
            if arg == "--skip" {
                selection.skips.extend(args.next());
            } else if let Some(skip) = arg.strip_prefix("--skip=") {
                selection.skips.push(skip.to_owned());
            } else if arg == "--exact" {
                selection.exact = true;
            } else if arg == "--list" {
                selection.list = true;
            } else if OPTIONS_WITH_VALUE.contains(&arg.as_str()) {
                args.next();
            } else if !arg.starts_with('-') {
                selection.filters.push(arg);
            }
        }
        selection
    }

    /// Whether the test called `name` runs.
    pub fn selects(&self, name: &str) -> bool {
        let matches = |pattern: &String| {
            if self.exact {
                name == pattern
            } else {
                name.contains(pattern.as_str())
            }
        };
        (self.filters.is_empty() || self.filters.iter().any(matches))
            && !self.skips.iter().any(matches)
    }

    /// Whether the command line asks for the list of selected tests (`--list`) instead of a run.
    pub fn lists(&self) -> bool {
        self.list
    }

    /// Whether the command line selects by name at all (a filter or a `--skip`): a harness then
    /// says how many of its tests were left out, as libtest's "filtered out" does.
    pub fn filters_by_name(&self) -> bool {
        !self.filters.is_empty() || !self.skips.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::TestSelection;

    fn selected<'a>(args: &[&str], names: &[&'a str]) -> Vec<&'a str> {
        let selection = TestSelection::parse(args.iter().copied());
        names
            .iter()
            .copied()
            .filter(|n| selection.selects(n))
            .collect()
    }

    const NAMES: &[&str] = &["plan", "plan_differential", "write", "ui", "build_ui_cases"];

    #[test]
    fn no_arguments_select_everything() {
        assert_eq!(selected(&[], NAMES), NAMES);
        assert!(!TestSelection::parse(Vec::<String>::new()).filters_by_name());
    }

    #[test]
    fn filters_select_by_substring_any_of_several() {
        assert_eq!(
            selected(&["plan", "wri"], NAMES),
            ["plan", "plan_differential", "write"]
        );
    }

    #[test]
    fn skips_leave_out_by_substring_in_both_forms() {
        assert_eq!(selected(&["--skip", "plan", "--skip=ui"], NAMES), ["write"]);
    }

    #[test]
    fn exact_matches_whole_names_for_filters_and_skips() {
        assert_eq!(
            selected(&["--skip", "ui", "--exact"], NAMES),
            ["plan", "plan_differential", "write", "build_ui_cases"]
        );
        assert_eq!(selected(&["--exact", "plan"], NAMES), ["plan"]);
    }

    #[test]
    fn option_values_are_not_filters() {
        let args = [
            "--test-threads",
            "2",
            "--format",
            "pretty",
            "--color=never",
            "-Z",
            "unstable-options",
            "--nocapture",
            "--quiet",
        ];
        assert_eq!(selected(&args, NAMES), NAMES);
        assert!(!TestSelection::parse(args).filters_by_name());
    }

    #[test]
    fn list_is_read() {
        let selection = TestSelection::parse(["--list", "write"]);
        assert!(selection.lists());
        assert!(selection.filters_by_name());
        assert!(!TestSelection::parse(["write"]).lists());
    }
}
