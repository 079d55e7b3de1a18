//! The deployment files stay true to the binary: the compose file and the
//! Kubernetes manifests validate with real tools (installed here, into
//! target/deploy-tools, so a fresh machine needs only Python 3), every
//! command, flag and CENSUS_* variable they use exists in `census --help`,
//! and the compose topology, started as local processes with the compose
//! file's own commands and environment, computes N0.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_yaml::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn run(command: &mut Command) -> String {
    let output = command.output().unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{command:?} failed:\n{text}");
    text
}

/// A virtual environment with the given packages, made once and reused.
/// Its marker holds the directory it was made in: a venv's scripts name
/// their interpreter by absolute path, so one moved with its target dir
/// (a copied or renamed checkout) is made again, not run broken.
fn venv(name: &str, installs: &[&[&str]]) -> PathBuf {
    let dir = root().join("target/deploy-tools").join(name);
    let ready = dir.join(".installed");
    let made_here = std::fs::read_to_string(&ready).is_ok_and(|made_in| Path::new(&made_in) == dir);
    if !made_here {
        let _ = std::fs::remove_dir_all(&dir);
        run(Command::new("python3").args(["-m", "venv"]).arg(&dir));
        for packages in installs {
            run(Command::new(dir.join("bin/pip"))
                .args(["install", "--quiet", "--disable-pip-version-check"])
                .args(*packages));
        }
        std::fs::write(&ready, dir.as_os_str().as_encoded_bytes()).unwrap();
    }
    dir.join("bin")
}

fn tools() -> &'static (PathBuf, PathBuf) {
    static TOOLS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    TOOLS.get_or_init(|| {
        // docker-compose 1.29 pins PyYAML 5, which needs Cython < 3 to build,
        // and jsonschema 3, which kubernetes-validate cannot use: two venvs.
        let compose = venv(
            "compose",
            &[
                &["cython<3", "wheel", "setuptools"],
                &["--no-build-isolation", "pyyaml==5.4.1"],
                &["docker-compose==1.29.2"],
            ],
        );
        let kube = venv("kubernetes", &[&["kubernetes-validate==1.33.1"]]);
        (compose.join("docker-compose"), kube.join("kubernetes-validate"))
    })
}

fn yaml_documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::Deserializer::from_str(&text).map(|document| Value::deserialize(document).unwrap()).collect()
}

use serde::Deserialize;

fn manifests() -> Vec<PathBuf> {
    let dir = root().join("deploy/kubernetes");
    let kustomization = &yaml_documents(&dir.join("kustomization.yaml"))[0];
    kustomization["resources"].as_sequence().unwrap().iter().map(|r| dir.join(r.as_str().unwrap())).collect()
}

#[test]
fn the_compose_file_is_valid_compose() {
    let (compose, _) = tools();
    run(Command::new(compose).arg("-f").arg(root().join("docker-compose.yml")).args(["config", "--quiet"]));
}

#[test]
fn the_kubernetes_manifests_are_valid_kubernetes() {
    let (_, validate) = tools();
    let mut files = manifests();
    assert!(files.iter().all(|f| f.exists()), "every resource in kustomization.yaml exists: {files:?}");
    // The demo's database Secret, applied by hand (not by `apply -k`).
    files.push(root().join("deploy/kubernetes/database-secret.yaml"));
    let output = run(Command::new(validate).args(["--strict"]).args(&files));
    assert!(!output.contains("ERROR"), "{output}");
}

/// Users get the public images: the Dockerfile's base images are build
/// arguments whose defaults are the public ones and its default (last) stage
/// compiles census; the compose file's Postgres is the official image unless
/// CENSUS_POSTGRES_IMAGE names the stand-in (scripts/container-images).
#[test]
fn the_public_images_stay_the_defaults() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    for default in ["ARG RUST_IMAGE=rust:1-slim-bookworm", "ARG RUNTIME_IMAGE=debian:bookworm-slim"] {
        assert!(dockerfile.lines().any(|l| l == default), "the Dockerfile has `{default}`");
    }
    let stages: Vec<&str> = dockerfile.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(stages.first().copied(), Some("FROM ${RUST_IMAGE} AS build"), "{stages:?}");
    assert_eq!(stages.last().copied(), Some("FROM runtime"), "the default target is the last stage: {stages:?}");
    let final_stage = dockerfile.rsplit("\nFROM ").next().unwrap();
    assert!(final_stage.contains("COPY --from=build "), "the default target takes the binary built in the image");

    let (compose, _) = tools();
    let config = |image: Option<&str>| {
        let mut command = Command::new(compose);
        command.arg("-f").arg(root().join("docker-compose.yml")).arg("config");
        match image {
            Some(image) => command.env("CENSUS_POSTGRES_IMAGE", image),
            None => command.env_remove("CENSUS_POSTGRES_IMAGE"),
        };
        let output = command.output().unwrap();
        assert!(output.status.success(), "{command:?}: {}", String::from_utf8_lossy(&output.stderr));
        let resolved: Value = serde_yaml::from_slice(&output.stdout).unwrap();
        resolved["services"]["postgres"]["image"].as_str().unwrap().to_string()
    };
    assert_eq!(config(None), "postgres:15");
    assert_eq!(config(Some("localhost/census-postgres:15")), "localhost/census-postgres:15");
}

/// Every `census ...` command line in the deployment files, with the
/// CENSUS_* variables set beside it.
fn command_lines() -> Vec<(Vec<String>, Vec<String>)> {
    let mut lines = Vec::new();
    let strings = |value: &Value| -> Vec<String> {
        value.as_sequence().map(|s| s.iter().filter_map(|v| v.as_str().map(String::from)).collect()).unwrap_or_default()
    };
    let compose = &yaml_documents(&root().join("docker-compose.yml"))[0];
    for (_, service) in compose["services"].as_mapping().unwrap() {
        let command = strings(&service["command"]);
        if command.first().map(String::as_str) == Some("census") {
            let env = service["environment"]
                .as_mapping()
                .map(|m| m.keys().filter_map(|k| k.as_str().map(String::from)).collect())
                .unwrap_or_default();
            lines.push((command, env));
        }
    }
    for file in manifests() {
        for document in yaml_documents(&file) {
            let containers = &document["spec"]["template"]["spec"]["containers"];
            for container in containers.as_sequence().into_iter().flatten() {
                let mut command = strings(&container["command"]);
                command.extend(strings(&container["args"]));
                if command.first().map(String::as_str) == Some("census") {
                    let env = container["env"]
                        .as_sequence()
                        .into_iter()
                        .flatten()
                        .filter_map(|e| e["name"].as_str().map(String::from))
                        .collect();
                    lines.push((command, env));
                }
            }
        }
    }
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    for line in dockerfile.lines().filter(|l| l.starts_with("CMD")) {
        let words: Vec<String> = serde_json::from_str(line.trim_start_matches("CMD").trim()).unwrap();
        lines.push((words, Vec::new()));
    }
    lines
}

#[test]
fn every_command_flag_and_variable_exists_in_census_help() {
    let lines = command_lines();
    assert!(lines.len() >= 5, "the compose file, the manifests and the Dockerfile run census: {lines:?}");
    for (command, env) in lines {
        let words: Vec<&str> = command.iter().skip(1).map(String::as_str).collect();
        let subcommand: Vec<&str> = words.iter().take_while(|w| !w.starts_with('-')).copied().collect();
        let help = run(Command::new(env!("CARGO_BIN_EXE_census")).args(&subcommand).arg("--help"));
        for flag in words.iter().filter(|w| w.starts_with("--")) {
            let flag = flag.split('=').next().unwrap();
            assert!(help.contains(flag), "`census {}` has no {flag}:\n{help}", subcommand.join(" "));
        }
        for variable in env.iter().filter(|v| v.starts_with("CENSUS_")) {
            assert!(
                help.contains(&format!("env: {variable}")),
                "`census {}` reads no {variable}:\n{help}",
                subcommand.join(" ")
            );
        }
    }
}

#[test]
fn the_compose_topology_computes_n0_as_local_processes() {
    let compose = &yaml_documents(&root().join("docker-compose.yml"))[0];
    let service = |name: &str| -> (Vec<String>, BTreeMap<String, String>) {
        let service = &compose["services"][name];
        let command =
            service["command"].as_sequence().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
        let env = service["environment"]
            .as_mapping()
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                (
                    k.as_str().unwrap().to_string(),
                    v.as_str()
                        .map(String::from)
                        .unwrap_or_else(|| serde_yaml::to_string(v).unwrap().trim().to_string()),
                )
            })
            .collect();
        (command, env)
    };
    let database = census_testpg::fresh_database();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let logs = std::env::temp_dir().join(format!("census-compose-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs).unwrap();
    // The `secrets` volume, here a directory.
    let secrets = format!("{}/", logs.display());
    // What the compose network names, here on loopback.
    let localize = |mut env: BTreeMap<String, String>| {
        for value in env.values_mut() {
            *value = value.replace("/secrets/", &secrets);
            if value.ends_with(":9464") || value.ends_with(":8080") {
                // Every metrics and status-page port, here one free port each.
                *value = "127.0.0.1:0".into();
            } else if value.starts_with("postgres://") {
                *value = database.clone();
            } else if value.ends_with(":50051") {
                *value = value
                    .replace("coordinator:50051", &format!("127.0.0.1:{port}"))
                    .replace("0.0.0.0:50051", &format!("127.0.0.1:{port}"));
            }
        }
        env
    };
    let start = |(command, env): (Vec<String>, BTreeMap<String, String>), log: &Path| {
        let mut process = Command::new(env!("CARGO_BIN_EXE_census"));
        let args: Vec<String> = command[1..].iter().map(|a| a.replace("/secrets/", &secrets)).collect();
        process.args(&args).envs(localize(env)).env_remove("RUST_LOG").stdout(Stdio::null());
        process.stderr(std::fs::File::create(log).unwrap());
        process.spawn().unwrap()
    };
    let mut init = start(service("secrets"), &logs.join("secrets.log"));
    assert!(init.wait().unwrap().success(), "{}", std::fs::read_to_string(logs.join("secrets.log")).unwrap());
    let mut children = vec![start(service("coordinator"), &logs.join("coordinator.log"))];
    children.push(start(service("worker"), &logs.join("worker-1.log")));
    children.push(start(service("worker"), &logs.join("worker-2.log")));

    let deadline = Instant::now() + Duration::from_secs(120);
    let coordinator_log = logs.join("coordinator.log");
    let finished = loop {
        let log = std::fs::read_to_string(&coordinator_log).unwrap_or_default();
        if log.contains("census finished: 6670903752021072936960") {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let status = Command::new(env!("CARGO_BIN_EXE_census"))
        .args(["status", "--coordinator", &format!("127.0.0.1:{port}"), "--json", "--token-file"])
        .arg(logs.join("operator-token"))
        .output()
        .unwrap();
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    let log = std::fs::read_to_string(&coordinator_log).unwrap_or_default();
    assert!(finished, "the coordinator's log shows the final N0:\n{log}");
    the_readme_greps_find_the_answer_in(&coordinator_log);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["final"], true);
    assert_eq!(status["n0"], "6670903752021072936960");
    let _ = std::fs::remove_dir_all(&logs);
}

/// Every `... logs ... coordinator ... | grep ...` of the README (docker
/// compose and kubectl), run by `sh` over a real coordinator's log, prints
/// the line the README shows after it: they found nothing when the README
/// grepped `N0` and the log said `census finished: ...` (issue 25).
fn the_readme_greps_find_the_answer_in(log: &Path) {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let greps: Vec<&str> =
        readme.lines().filter(|l| l.contains(" logs ") && l.contains("coordinator") && l.contains("| grep ")).collect();
    assert!(greps.len() >= 2, "the README greps the compose and the Kubernetes coordinator's logs: {greps:?}");
    for line in greps {
        let (command, shown) = line.split_once('#').unwrap_or((line, ""));
        let grep = command.split("| ").last().unwrap().trim();
        let output = Command::new("sh").arg("-c").arg(format!("{grep} < '{}'", log.display())).output().unwrap();
        let found = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success() && !found.is_empty(), "`{grep}` finds nothing in the coordinator's log");
        // What the compose line shows is the log line's own text.
        let shown = shown.trim();
        assert!(
            shown.is_empty() || found.contains(shown),
            "`{grep}` prints {found:?}, not {shown:?} as the README shows"
        );
    }
}

/// Every Secret a manifest reads (`secretKeyRef`, a `secret` volume), by
/// name, with the keys read from it.
fn secrets_read(value: &Value, read: &mut BTreeMap<String, BTreeSet<String>>) {
    match value {
        Value::Mapping(map) => {
            if let Some(reference) = map.get("secretKeyRef") {
                let keys = read.entry(reference["name"].as_str().unwrap().to_string()).or_default();
                keys.insert(reference["key"].as_str().unwrap().to_string());
            }
            if let Some(name) = map.get("secret").and_then(|secret| secret["secretName"].as_str()) {
                read.entry(name.to_string()).or_default();
            }
            map.values().for_each(|v| secrets_read(v, read));
        }
        Value::Sequence(items) => items.iter().for_each(|v| secrets_read(v, read)),
        _ => {}
    }
}

/// `kubectl apply -k deploy/kubernetes` applies no Secret, so it never
/// overwrites the ones the operator made with `kubectl create secret` (the
/// database Secret was in the kustomization, and `apply -k` replaced the
/// URL made for a managed Postgres: issue 25); and each Secret the manifests
/// read, with each key, is one the README's commands create.
#[test]
fn applying_the_kustomization_overwrites_no_secret() {
    let mut read = BTreeMap::new();
    for file in manifests() {
        for document in yaml_documents(&file) {
            assert_ne!(document["kind"].as_str(), Some("Secret"), "`kubectl apply -k` applies {}", file.display());
            secrets_read(&document, &mut read);
        }
    }
    assert!(read.contains_key("census-tokens") && read.contains_key("census-database"), "{read:?}");
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    // The README's Kubernetes commands, continuation lines joined.
    let commands = readme.replace("\\\n", " ");
    for (name, keys) in read {
        let create = commands
            .lines()
            .find(|l| l.contains(&format!("create secret generic {name} ")))
            .unwrap_or_else(|| panic!("the README never creates the Secret {name}"));
        for key in keys {
            assert!(
                create.contains(&format!("--from-literal={key}=")) || create.contains(&format!("--from-file={key}")),
                "the README's Secret {name} has no key {key}: {create}"
            );
        }
    }
}

/// `.ci/run` installs what the tests need with apt-get: as root directly,
/// otherwise through sudo, and with neither it says what to install and
/// exits 1 (it called `sudo` where there was none: issue 25). Run on a
/// PATH of stand-ins: `apt-get` and `sudo` write down how they were called,
/// `id` says who the user is, `cargo` fails, which ends the script right
/// after its installing step; no Chromium, no sqlite3.
#[test]
fn the_ci_script_installs_as_root_without_sudo_and_explains_without_either() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("census-ci-path-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (with_sudo, without_sudo) = (dir.join("with-sudo"), dir.join("without-sudo"));
    let calls = dir.join("calls");
    let script = |bin: &Path, name: &str, body: &str| {
        std::fs::create_dir_all(bin).unwrap();
        let path = bin.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    for bin in [&with_sudo, &without_sudo] {
        script(bin, "apt-get", r#"echo "apt-get $*" >> "$CALLS""#);
        script(bin, "id", r#"echo "$FAKE_UID""#);
        script(bin, "cargo", "exit 3");
        script(bin, "dirname", r#"exec /usr/bin/dirname "$@""#);
    }
    script(&with_sudo, "sudo", r#"echo "sudo $*" >> "$CALLS"; exec "$@""#);
    let ci = |bin: &Path, uid: &str| {
        let _ = std::fs::remove_file(&calls);
        let output = Command::new("/bin/bash")
            .arg(root().join(".ci/run"))
            .env_clear()
            .env("PATH", bin)
            .env("FAKE_UID", uid)
            .env("CALLS", &calls)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&output.stderr).into_owned();
        (output.status.code(), said, std::fs::read_to_string(&calls).unwrap_or_default())
    };
    let install = "apt-get install -y -qq chromium sqlite3";
    // Root, no sudo anywhere: apt-get itself.
    let (code, said, calls_made) = ci(&without_sudo, "0");
    assert_eq!(code, Some(3), "it went on to cargo: {said}");
    assert_eq!(calls_made, format!("apt-get update -qq\n{install}\n"), "{said}");
    assert!(!said.contains("sudo"), "{said}");
    // It says first what it will install, only what is missing, and why (issue 46).
    assert!(
        said.contains(".ci/run: installs with apt-get: chromium sqlite3 (chromium: the status-page test; sqlite3: the SQL audit test)"),
        "{said}"
    );
    assert!(said.contains(".ci/run: takes about "), "{said}");
    // Not root, with sudo: through it.
    let (code, said, calls_made) = ci(&with_sudo, "1000");
    assert_eq!(code, Some(3), "{said}");
    assert!(calls_made.contains(&format!("sudo {install}\n{install}\n")), "{calls_made}");
    // Not root, no sudo: what to do, and nothing run.
    let (code, said, calls_made) = ci(&without_sudo, "1000");
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("installing needs root or sudo: apt-get install chromium sqlite3 by hand"), "{said}");
    assert_eq!(calls_made, "", "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}
