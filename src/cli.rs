//! The command line, as clap types only: `rollguard deploy | diff | plan | schema | demo |
//! history | show | rollback | unlock | status` and their flags. What each command does is in
//! `commands/`.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{EnumValueParser, PossibleValue, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::FailurePolicy;
use crate::util::duration::DurationError;
use crate::util::shard::{Shard, ShardError};
use crate::util::size::SizeError;

#[derive(Debug, Parser)]
#[command(
    name = "rollguard",
    version,
    about = "Deploy Kubernetes manifests to many clusters at once, fail fast, roll back by itself"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply the manifests to every target at once and wait for the rollout.
    Deploy(DeployArgs),
    /// What a deploy would change on every target (server-side dry run), nothing written.
    Diff(DiffArgs),
    /// The plan: as `diff`, or with --offline against a git ref, no cluster at all.
    Plan(PlanArgs),
    /// Run every check (`checks:`) once now against every target, nothing deployed.
    Check(CheckArgs),
    /// Print the JSON Schema of rollguard.yaml (for editors).
    Schema,
    /// Start three simulated clusters and show a deploy, a fast failure and the report.
    Demo(DemoArgs),
    /// Write a first rollguard.yaml: a target per kubeconfig context, the manifests folder.
    Init(InitArgs),
    #[command(flatten)]
    Release(ReleaseCommand),
    /// What runs on every target now: revision, commit, lock, health (and --drift).
    Status(StatusArgs),
    /// Combine the JSON reports of a deploy split with `--shard I/N` (`report merge`).
    #[command(subcommand)]
    Report(ReportCommand),
    /// After a deploy split with `--shard`: apply the failure policy across the shards
    /// (under rollback-all, roll back the shards that deployed when another failed).
    Conclude(ConcludeArgs),
}

/// `rollguard report ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum ReportCommand {
    /// One report from the shards' reports: the table, the JSON, and the step summary, PR
    /// comment and Deployments the shards left out. Exit code as the deploy's.
    Merge(MergeArgs),
}

/// `rollguard report merge DIR... --out PATH`.
#[derive(Debug, Clone, Args)]
pub struct MergeArgs {
    /// Folders holding the shards' `--report` files (searched 4 levels down for *.json).
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Write the combined JSON report here.
    #[arg(long, value_name = "PATH")]
    pub out: PathBuf,
    /// The config: orders the rows as it does and names the targets of a shard that never
    /// reported (each then counts as failed; without it, one failed row for the shard).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub github: GithubArgs,
}

/// `rollguard conclude --reports DIR`.
#[derive(Debug, Clone, Args)]
pub struct ConcludeArgs {
    /// Folders holding the shards' `--report` files (repeatable).
    #[arg(long, required = true, value_name = "DIR")]
    pub reports: Vec<PathBuf>,
    #[command(flatten)]
    pub files: ConfigFiles,
    /// What to roll back across the shards [default: the config's on_failure]
    #[arg(
        long,
        value_name = "POLICY",
        value_parser = trimmed::<FailurePolicy>(),
        ignore_case = true
    )]
    pub on_failure: Option<FailurePolicy>,
}

impl Command {
    /// The config and targets the command works on (none for `schema` and `demo`).
    pub fn selection(&self) -> Option<&Selection> {
        match self {
            Command::Deploy(a) => Some(&a.selection),
            Command::Diff(a) => Some(&a.selection),
            Command::Plan(a) => Some(&a.diff.selection),
            Command::Check(a) => Some(&a.selection),
            Command::Schema | Command::Demo(_) | Command::Init(_) => None,
            Command::Report(_) | Command::Conclude(_) => None,
            Command::Release(ReleaseCommand::History(a)) => Some(&a.selection),
            Command::Release(ReleaseCommand::Show(a)) => Some(&a.selection),
            Command::Release(ReleaseCommand::Rollback(a)) => Some(&a.selection),
            Command::Release(ReleaseCommand::Unlock(a)) => Some(&a.selection),
            Command::Status(a) => Some(&a.selection),
        }
    }
}

/// `--config` and `--kubeconfig`, the same for every command that reads the config.
#[derive(Debug, Clone, Default, Args)]
pub struct ConfigFiles {
    /// The config file [default: ./rollguard.yaml; env ROLLGUARD_CONFIG]
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Kubeconfig for targets that name none (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct DeployArgs {
    #[command(flatten)]
    pub selection: Selection,
    /// Deadline per target for apply and rollout, e.g. 90s, 5m.
    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg)]
    pub timeout: Option<Duration>,
    /// The commit being deployed (default: $GITHUB_SHA, then `git rev-parse HEAD`).
    #[arg(long, value_name = "SHA")]
    pub commit: Option<String>,
    /// Write the JSON report here.
    #[arg(long, value_name = "PATH")]
    pub report: Option<PathBuf>,
    /// Take ownership of fields that another field manager owns.
    #[arg(long)]
    pub force_conflicts: bool,
    /// Show what would change instead (as `rollguard diff`): nothing is written.
    #[arg(long)]
    pub dry_run: bool,
    /// Deploy even when nothing would change: a new record, and every stage runs.
    #[arg(long, conflicts_with = "dry_run")]
    pub force: bool,
    /// After a healthy deploy of a target, delete the objects of its previous release that
    /// the manifests no longer declare and that are still this app's (config `prune: true`).
    #[arg(long)]
    pub prune: bool,
    /// What to roll back when a target fails [default: the config's on_failure]
    #[arg(
        long,
        value_name = "POLICY",
        value_parser = trimmed::<FailurePolicy>(),
        ignore_case = true,
        conflicts_with = "dry_run"
    )]
    pub on_failure: Option<FailurePolicy>,
    /// How many targets run at once [default: what --memory-budget holds].
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// Memory the targets in flight may use, e.g. 512MiB, 1GiB [default: 512MiB]: the
    /// default concurrency is what it holds at the measured memory per target.
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    pub memory_budget: Option<u64>,
    /// How long to wait for another run's deploy lock, e.g. 2m (lock.timeout).
    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg, conflicts_with = "dry_run")]
    pub lock_timeout: Option<Duration>,
    /// Deploy only the targets of this wave (their `wave:`; after any --target selection).
    /// A later wave starts only when every target of the earlier waves runs this commit.
    #[arg(long, value_name = "N")]
    pub wave: Option<u32>,
    /// Deploy only shard I of N: the targets rendezvous hashing of their names gives it
    /// (each wave sliced apart), for a CI job matrix; env ROLLGUARD_SHARD. The PR comment,
    /// step summary and Deployments are left to `rollguard report merge`.
    #[arg(long, value_name = "I/N", value_parser = parse_shard_arg)]
    pub shard: Option<Shard>,
    /// With --dry-run: how the plan is printed and what the exit code says.
    #[command(flatten)]
    pub plan_output: PlanOutput,
    #[command(flatten)]
    pub saved: SavedPlanArgs,
    #[command(flatten)]
    pub github: GithubArgs,
}

/// How a plan is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PlanFormat {
    /// Per target the changes and diffs, then the summary line.
    #[default]
    Text,
    /// The plan as JSON (docs/plan-schema.json).
    Json,
}

/// How a plan is printed and what its exit code says (`diff`, `plan`, `deploy --dry-run`).
#[derive(Debug, Clone, Args, Default)]
pub struct PlanOutput {
    /// Exit 0 for no changes, 2 for changes, 1 for an error (terraform's -detailed-exitcode).
    #[arg(long)]
    pub exit_code: bool,
    /// text or json (the plan, docs/plan-schema.json).
    #[arg(
        short = 'o',
        long = "output",
        value_enum,
        default_value_t = PlanFormat::Text,
        value_name = "FORMAT"
    )]
    pub format: PlanFormat,
    /// Name the unchanged objects of each target, not only count them.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Save the plan to this file for `deploy --plan` (docs/plan-file-schema.json; Secrets
    /// by digest only, safe as a CI artifact); its digest is printed.
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
}

/// `deploy --plan`: apply a saved plan.
#[derive(Debug, Clone, Args, Default)]
pub struct SavedPlanArgs {
    /// Apply this saved plan (`diff --out`) and nothing else: refused, before any write, when
    /// the manifests or a live object moved since it was made.
    #[arg(long, value_name = "PATH", conflicts_with = "dry_run")]
    pub plan: Option<PathBuf>,
    /// The oldest plan `--plan` applies, e.g. 2h [default: 24h].
    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg, requires = "plan")]
    pub plan_max_age: Option<Duration>,
    /// When the plan no longer holds: show the new diff and apply it once confirmed (--yes,
    /// or a "y" on a terminal).
    #[arg(long, requires = "plan")]
    pub replan: bool,
    /// Confirm the re-plan of --replan beforehand.
    #[arg(long, requires = "replan")]
    pub yes: bool,
}

/// `rollguard check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub selection: Selection,
}

/// `rollguard diff`.
#[derive(Debug, Clone, Args)]
pub struct DiffArgs {
    #[command(flatten)]
    pub selection: Selection,
    /// Deadline per target, e.g. 90s, 5m (default: the config's wait.timeout).
    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg)]
    pub timeout: Option<Duration>,
    /// The commit being planned (default: $GITHUB_SHA, then `git rev-parse HEAD`).
    #[arg(long, value_name = "SHA")]
    pub commit: Option<String>,
    /// Also write the JSON report (with the plan in its `plan` field) here.
    #[arg(long, value_name = "PATH")]
    pub report: Option<PathBuf>,
    /// Dry-run the applies taking ownership of fields another manager owns, as the deploy would.
    #[arg(long)]
    pub force_conflicts: bool,
    /// Show which objects the manifests dropped a deploy with `--prune` would delete (config
    /// `prune: true`).
    #[arg(long)]
    pub prune: bool,
    /// How many targets are asked at once [default: what --memory-budget holds].
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// Memory the targets in flight may use, as `deploy --memory-budget`.
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    pub memory_budget: Option<u64>,
    /// Only the targets of shard I of N, as `deploy --shard` (env ROLLGUARD_SHARD).
    #[arg(long, value_name = "I/N", value_parser = parse_shard_arg)]
    pub shard: Option<Shard>,
    #[command(flatten)]
    pub output: PlanOutput,
    /// The plan's PR comment (its own, beside the deploy's) and `--report-markdown`.
    #[command(flatten)]
    pub github: GithubArgs,
}

/// `rollguard plan`.
#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    /// No cluster at all: compare the manifests with those of a git ref.
    #[arg(long)]
    pub offline: bool,
    /// The ref to compare with [default: the merge base with the default branch, else HEAD~1].
    #[arg(long, value_name = "REF", requires = "offline")]
    pub against: Option<String>,
    #[command(flatten)]
    pub diff: DiffArgs,
}

/// Where the report goes besides the terminal: GitHub, and a markdown file.
#[derive(Clone, Default, Args)]
pub struct GithubArgs {
    /// Talk to GitHub (PR comment, Deployments) also outside GitHub Actions (default: on
    /// when GITHUB_ACTIONS=true).
    #[arg(long, conflicts_with = "no_github")]
    pub github: bool,
    /// Nothing to GitHub at all, even in GitHub Actions.
    #[arg(long)]
    pub no_github: bool,
    /// The GitHub token (default: $GITHUB_TOKEN).
    #[arg(long, value_name = "TOKEN")]
    pub github_token: Option<String>,
    /// Comment on this pull request (default: the event's, or the commit's).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub pr: Option<u64>,
    /// Write the PR comment's markdown here too (for GitLab, Jenkins, ... to post).
    #[arg(long, value_name = "PATH")]
    pub report_markdown: Option<PathBuf>,
}

// By hand, so that the token never shows in a debug print.
impl std::fmt::Debug for GithubArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GithubArgs")
            .field("github", &self.github)
            .field("no_github", &self.no_github)
            .field(
                "github_token",
                &self.github_token.as_ref().map(|_| "<redacted>"),
            )
            .field("pr", &self.pr)
            .field("report_markdown", &self.report_markdown)
            .finish()
    }
}

#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Simulated seconds per real second in the demo clusters.
    #[arg(long, default_value_t = 5.0)]
    pub time_scale: f64,
    /// Write the demo's JSON report here.
    #[arg(long, value_name = "PATH")]
    pub report: Option<PathBuf>,
}

/// `rollguard init`.
#[derive(Debug, Clone, Args)]
pub struct InitArgs {
    /// Where to write the config (its manifest paths are relative to its folder).
    #[arg(long, value_name = "PATH", default_value = "rollguard.yaml")]
    pub out: PathBuf,
    /// The kubeconfig whose contexts become targets [default: $KUBECONFIG, then
    /// ~/.kube/config].
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Only these contexts (repeatable, or a,b) [default: every context].
    #[arg(long = "context", value_name = "NAME")]
    pub contexts: Vec<String>,
    /// The app's name [default: the folder's name, as a DNS label].
    #[arg(long, value_name = "NAME")]
    pub app: Option<String>,
    /// Replace an existing config.
    #[arg(long)]
    pub force: bool,
}

/// The release commands, flattened into the top-level command line.
#[derive(Debug, Clone, Subcommand)]
pub enum ReleaseCommand {
    /// Release history of each target: revision, status, commit, time, duration, note.
    History(HistoryArgs),
    /// One release record with its manifests (Secret values redacted).
    Show(ShowArgs),
    /// Re-apply an earlier good revision (or a commit's manifests) as a new revision.
    Rollback(RollbackArgs),
    /// Force-release the deploy lock of the app (when a run died and you cannot wait).
    Unlock(UnlockArgs),
}

/// Which config and which targets a command works on (every command that selects targets).
#[derive(Debug, Clone, Default, Args)]
pub struct Selection {
    #[command(flatten)]
    pub files: ConfigFiles,
    /// Only the target with this name or context (repeatable, or a,b; default: every target).
    #[arg(long = "target", visible_alias = "context", value_name = "NAME")]
    pub targets: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub selection: Selection,
    /// yaml or json: one document for every target [default: a table per target].
    #[arg(short = 'o', long = "output", value_enum, value_name = "FORMAT")]
    pub output: Option<RecordFormat>,
}

#[derive(Debug, Clone, Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub selection: Selection,
    /// The revision to show (see `rollguard history`).
    #[arg(long, value_name = "N")]
    pub revision: u64,
    /// yaml (a document per target) or json (one object keyed by target).
    #[arg(
        short = 'o',
        long = "output",
        value_enum,
        default_value_t = RecordFormat::Yaml,
        value_name = "FORMAT"
    )]
    pub output: RecordFormat,
}

#[derive(Debug, Clone, Args)]
pub struct RollbackArgs {
    #[command(flatten)]
    pub selection: Selection,
    /// The revision to go back to [default: the last good revision before the current one].
    #[arg(long, value_name = "N", conflicts_with = "from_git")]
    pub revision: Option<u64>,
    /// Re-apply the manifests of this commit, read with git (fetched if the clone is shallow).
    #[arg(long, value_name = "SHA")]
    pub from_git: Option<String>,
    /// Show what would change, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask for confirmation in a terminal.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Allow a revision that never ran healthy (failed or pending).
    #[arg(long)]
    pub force: bool,
    /// Take ownership of fields that another field manager owns.
    #[arg(long)]
    pub force_conflicts: bool,
    /// Write the JSON report here (the deploy report's schema: each target rolled back, or
    /// not, and why).
    #[arg(long, value_name = "PATH")]
    pub report: Option<PathBuf>,
    /// GitHub as a deploy has it (PR comment, step summary, outputs) and
    /// `--report-markdown` (the body a deploy's PR comment has).
    #[command(flatten)]
    pub github: GithubArgs,
}

#[derive(Debug, Clone, Args)]
pub struct UnlockArgs {
    #[command(flatten)]
    pub selection: Selection,
}

/// `rollguard status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub selection: Selection,
    /// table, json or yaml (the JSON/YAML shape is in docs/release-history.md).
    #[arg(
        short = 'o',
        long = "output",
        value_enum,
        default_value_t = StatusFormat::Table,
        value_name = "FORMAT"
    )]
    pub output: StatusFormat,
    /// Also compare each target's live objects with its current revision (server-side dry
    /// run): anything changed in the cluster since, or missing, is drift (exit 1).
    #[arg(long)]
    pub drift: bool,
    /// Deadline per target for all its reads, e.g. 10s, 1m.
    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg, default_value = "30s")]
    pub timeout: Duration,
}

/// How `rollguard status` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusFormat {
    Table,
    Json,
    Yaml,
}

/// Output format of release records (`show`, `history -o`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum RecordFormat {
    #[default]
    #[value(alias = "yml")]
    Yaml,
    Json,
}

/// A `ValueEnum` flag's parser that trims the value first: the action passes its inputs as
/// given (a trailing newline of a YAML block), and the config file's values are trimmed too.
/// clap's own list of names and its message stay.
#[derive(Clone)]
pub struct Trimmed<T: ValueEnum + Clone + Send + Sync + 'static>(EnumValueParser<T>);

/// [`Trimmed`] for `T`.
pub fn trimmed<T: ValueEnum + Clone + Send + Sync + 'static>() -> Trimmed<T> {
    Trimmed(EnumValueParser::new())
}

impl<T: ValueEnum + Clone + Send + Sync + 'static> TypedValueParser for Trimmed<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        let value = value.to_str().map_or(value, |v| OsStr::new(v.trim()));
        self.0.parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        self.0.possible_values()
    }
}

/// `--shard I/N`, strictly: 1 <= I <= N.
pub fn parse_shard_arg(text: &str) -> Result<Shard, ShardError> {
    text.parse::<Shard>()
}

/// `--timeout` and the other durations: 90s, 5m, 1h30m.
pub fn parse_duration_arg(text: &str) -> Result<Duration, DurationError> {
    crate::util::duration::parse_duration(text)
}

/// `--memory-budget`: a size such as 512MiB or 1GiB (a bad one is a usage error, exit 2).
pub fn parse_size_arg(text: &str) -> Result<u64, SizeError> {
    crate::util::size::parse_size(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deploy_flags_parse() {
        let cli = Cli::try_parse_from([
            "rollguard",
            "deploy",
            "--config",
            "x.yaml",
            "--context",
            "a",
            "--context",
            "b",
            "--timeout",
            "30s",
            "--force-conflicts",
            "--on-failure",
            "none",
            "--concurrency",
            "4",
            "--report",
            "r.json",
        ])
        .expect("parses");
        let Command::Deploy(args) = cli.command else {
            panic!("deploy expected")
        };
        assert_eq!(args.selection.files.config, Some(PathBuf::from("x.yaml")));
        assert_eq!(args.selection.targets, vec!["a", "b"]);
        assert_eq!(args.timeout, Some(Duration::from_secs(30)));
        assert!(args.force_conflicts && !args.dry_run && !args.force);
        assert_eq!(args.on_failure, Some(FailurePolicy::None));
        assert_eq!(args.concurrency, Some(4));
        assert_eq!(args.wave, None);
        assert!(Cli::try_parse_from(["rollguard", "deploy", "--timeout", "soon"]).is_err());
        // --wave: a wave number, with --dry-run too.
        let Command::Deploy(args) =
            Cli::try_parse_from(["rollguard", "deploy", "--wave", "2", "--dry-run"])
                .expect("parses")
                .command
        else {
            panic!("deploy expected")
        };
        assert_eq!(args.wave, Some(2));
        for bad in ["-1", "x", "1.5"] {
            assert!(
                Cli::try_parse_from(["rollguard", "deploy", "--wave", bad]).is_err(),
                "{bad}"
            );
        }
        // GitHub flags: --pr must be a number from 1, --github and --no-github exclude each other.
        let cli = Cli::try_parse_from([
            "rollguard",
            "deploy",
            "--github",
            "--pr",
            "12",
            "--github-token",
            "s3cret",
            "--report-markdown",
            "r.md",
        ])
        .expect("parses");
        let Command::Deploy(args) = cli.command else {
            panic!("deploy expected")
        };
        assert!(args.github.github && args.github.pr == Some(12));
        assert!(!format!("{args:?}").contains("s3cret"));
        for bad in [
            &["--pr", "0"][..],
            &["--pr", "x"],
            &["--github", "--no-github"],
        ] {
            let argv: Vec<&str> = ["rollguard", "deploy"].iter().chain(bad).copied().collect();
            assert!(Cli::try_parse_from(argv).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_command_that_selects_targets_takes_target_and_context() {
        for command in [
            "deploy", "diff", "plan", "history", "show", "rollback", "unlock", "status",
        ] {
            for flag in ["--target", "--context"] {
                let mut argv = vec!["rollguard", command, flag, "eu", flag, "us"];
                if command == "show" {
                    argv.extend(["--revision", "1"]);
                }
                let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
                let selection = cli.command.selection().expect("selects targets");
                assert_eq!(selection.targets, ["eu", "us"], "{argv:?}");
            }
        }
        assert!(
            Cli::try_parse_from(["rollguard", "schema"])
                .is_ok_and(|c| c.command.selection().is_none())
        );
    }

    #[test]
    fn status_flags() {
        let Command::Status(args) = Cli::try_parse_from(["rollguard", "status"])
            .expect("parses")
            .command
        else {
            panic!("status expected")
        };
        assert_eq!(args.output, StatusFormat::Table);
        assert!(!args.drift);
        assert_eq!(args.timeout, Duration::from_secs(30));
        for (flag, want) in [
            ("json", StatusFormat::Json),
            ("yaml", StatusFormat::Yaml),
            ("table", StatusFormat::Table),
        ] {
            let argv = [
                "rollguard",
                "status",
                "--drift",
                "-o",
                flag,
                "--timeout",
                "5s",
            ];
            let Command::Status(args) = Cli::try_parse_from(argv).expect("parses").command else {
                panic!("status expected")
            };
            assert_eq!(args.output, want);
            assert!(args.drift);
            assert_eq!(args.timeout, Duration::from_secs(5));
        }
        assert!(Cli::try_parse_from(["rollguard", "status", "-o", "text"]).is_err());
    }

    #[test]
    fn shard_flags() {
        let parse = |args: &[&str]| {
            let mut all = vec!["rollguard"];
            all.extend_from_slice(args);
            Cli::try_parse_from(all)
        };
        let two = Some(Shard { index: 2, count: 3 });
        let Command::Deploy(args) = parse(&["deploy", "--shard", "2/3"])
            .expect("parses")
            .command
        else {
            panic!("deploy expected")
        };
        assert_eq!(args.shard, two);
        let Command::Diff(args) = parse(&["diff", "--shard", "2/3"]).expect("parses").command
        else {
            panic!("diff expected")
        };
        assert_eq!(args.shard, two);
        for bad in ["0/3", "4/3", "1/0", "2", "a/b", "+1/3"] {
            let e = parse(&["deploy", "--shard", bad]).expect_err(bad);
            assert!(
                e.to_string().contains("I/N") || e.to_string().contains("shards"),
                "{e}"
            );
        }
        let Command::Report(ReportCommand::Merge(merge)) = parse(&[
            "report", "merge", "a", "b", "--out", "r.json", "--config", "c.yaml",
        ])
        .expect("parses")
        .command
        else {
            panic!("report merge expected")
        };
        assert_eq!(merge.dirs, [PathBuf::from("a"), PathBuf::from("b")]);
        assert_eq!(merge.out, PathBuf::from("r.json"));
        assert!(
            parse(&["report", "merge", "--out", "r.json"]).is_err(),
            "a folder is required"
        );
        assert!(
            parse(&["report", "merge", "a"]).is_err(),
            "--out is required"
        );
        let Command::Conclude(conclude) =
            parse(&["conclude", "--reports", "r", "--on-failure", "none"])
                .expect("parses")
                .command
        else {
            panic!("conclude expected")
        };
        assert_eq!(conclude.reports, [PathBuf::from("r")]);
        assert!(parse(&["conclude"]).is_err(), "--reports is required");
    }

    #[test]
    fn dry_run_flags() {
        let parse = |args: &[&str]| {
            let mut all = vec!["rollguard"];
            all.extend_from_slice(args);
            Cli::try_parse_from(all)
        };
        let Command::Deploy(args) = parse(&["deploy", "--dry-run", "--exit-code", "-o", "json"])
            .expect("parses")
            .command
        else {
            panic!("deploy expected")
        };
        assert!(args.dry_run && args.plan_output.exit_code);
        assert_eq!(args.plan_output.format, PlanFormat::Json);
        // A dry run has no failure policy and takes no lock: those flags would do nothing.
        assert!(parse(&["deploy", "--dry-run", "--on-failure", "none"]).is_err());
        assert!(parse(&["deploy", "--dry-run", "--lock-timeout", "1m"]).is_err());
        assert!(
            parse(&["diff", "-o", "yaml"]).is_err(),
            "unknown formats are refused"
        );
        let Command::Plan(plan) = parse(&["plan", "--offline", "--against", "main"])
            .expect("parses")
            .command
        else {
            panic!("plan expected")
        };
        assert!(plan.offline);
        assert_eq!(plan.against.as_deref(), Some("main"));
        assert!(
            parse(&["plan", "--against", "main"]).is_err(),
            "--against needs --offline"
        );
    }

    /// The enumerated flags take the names of their `ValueEnum`, in any case, with the
    /// extra spellings (`rollback_failed`, `yml`); anything else is a usage error (exit 2).
    #[test]
    fn enumerated_flags_take_their_names() {
        let parse = |args: &[&str]| {
            let mut all = vec!["rollguard"];
            all.extend_from_slice(args);
            Cli::try_parse_from(all)
        };
        let on_failure = |args: &[&str]| match parse(args).map(|c| c.command) {
            Ok(Command::Deploy(a)) => Ok(a.on_failure),
            Ok(Command::Conclude(a)) => Ok(a.on_failure),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.kind()),
        };
        use clap::error::ErrorKind::InvalidValue;
        for (policy, want) in [
            ("rollback-all", Ok(Some(FailurePolicy::RollbackAll))),
            ("rollback-failed", Ok(Some(FailurePolicy::RollbackFailed))),
            ("rollback_failed", Ok(Some(FailurePolicy::RollbackFailed))),
            (
                "Rollback-If-All-Fail",
                Ok(Some(FailurePolicy::RollbackIfAllFail)),
            ),
            ("none", Ok(Some(FailurePolicy::None))),
            (" none\n", Ok(Some(FailurePolicy::None))),
            ("sometimes", Err(InvalidValue)),
            ("", Err(InvalidValue)),
        ] {
            assert_eq!(
                on_failure(&["deploy", "--on-failure", policy]),
                want,
                "{policy:?}"
            );
            let conclude = ["conclude", "--reports", "r", "--on-failure", policy];
            assert_eq!(on_failure(&conclude), want, "{policy:?}");
        }
        assert_eq!(on_failure(&["deploy"]), Ok(None));
        let refused = parse(&["deploy", "--on-failure", "rollback-al"]).expect_err("refused");
        assert_eq!(refused.exit_code(), 2);
        assert!(refused.to_string().contains("rollback-all"), "{refused}");

        let records = |args: &[&str]| match parse(args).map(|c| c.command) {
            Ok(Command::Release(ReleaseCommand::History(a))) => Ok(a.output),
            Ok(Command::Release(ReleaseCommand::Show(a))) => Ok(Some(a.output)),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.kind()),
        };
        for (args, want) in [
            (&["history"][..], Ok(None)),
            (&["history", "-o", "yml"], Ok(Some(RecordFormat::Yaml))),
            (&["history", "-o", "json"], Ok(Some(RecordFormat::Json))),
            (&["history", "-o", "table"], Err(InvalidValue)),
            (&["show", "--revision", "1"], Ok(Some(RecordFormat::Yaml))),
            (
                &["show", "--revision", "1", "-o", "json"],
                Ok(Some(RecordFormat::Json)),
            ),
        ] {
            assert_eq!(records(args), want, "{args:?}");
        }
        let plan = |args: &[&str]| match parse(args).map(|c| c.command) {
            Ok(Command::Diff(a)) => Ok(a.output.format),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.kind()),
        };
        assert_eq!(plan(&["diff"]), Ok(PlanFormat::Text));
        assert_eq!(plan(&["diff", "-o", "json"]), Ok(PlanFormat::Json));
        assert_eq!(plan(&["diff", "-o", "yaml"]), Err(InvalidValue));
    }

    /// The value parsers' typed errors are clap's message.
    #[test]
    fn value_parsers_say_what_is_wrong() {
        assert_eq!(
            parse_duration_arg("90s").ok(),
            Some(Duration::from_secs(90))
        );
        assert_eq!(parse_size_arg("1KiB").ok(), Some(1024));
        assert_eq!(
            parse_shard_arg("1/2").ok(),
            Some(Shard { index: 1, count: 2 })
        );
        for (flag, bad) in [
            ("--timeout", "soon"),
            ("--memory-budget", "lots"),
            ("--shard", "3/2"),
        ] {
            let e = Cli::try_parse_from(["rollguard", "deploy", flag, bad]).expect_err(bad);
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{e}");
            let why = match flag {
                "--timeout" => parse_duration_arg(bad).err().map(|e| e.to_string()),
                "--memory-budget" => parse_size_arg(bad).err().map(|e| e.to_string()),
                _ => parse_shard_arg(bad).err().map(|e| e.to_string()),
            };
            let why = why.expect("refused");
            assert!(e.to_string().contains(&why), "{e} lacks {why}");
        }
    }
}
