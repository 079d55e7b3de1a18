//! `census layers`: the 2 x c layer recurrence on this machine, through the
//! same map, reduce and class jobs a cluster runs (`census_layers`): the
//! parts of each layer are files in `--dir` (a temporary directory when it
//! is not given), the jobs of a stage run on `--threads` threads.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use census_layers::Plane;
use census_layers::local::{self, LayerSummary};
use census_math::census::{Census, Layers};
use census_math::shapes;
use census_math::total::thousands;
use serde::Serialize;

use super::UsageError;

#[derive(clap::Args)]
pub struct Args {
    /// The box shape: 2xC or Cx2 (the transpose, same count), C = 2..6.
    #[arg(long, value_parser = parse_boxes)]
    boxes: usize,
    /// Stop after this layer (1..=C rows of a band); the grid total needs the
    /// last layer, C.
    #[arg(long)]
    to_layer: Option<usize>,
    /// Threads counting the jobs of a stage.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    threads: u32,
    /// Where the layers' files go (kept, and a run stopped part-way goes on
    /// from the jobs it finished); a temporary directory, removed at the
    /// end, when not given.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Shards of each layer's parents (map jobs a step); default 4 x threads.
    #[arg(long)]
    shards: Option<u32>,
    /// Parts of each layer (reduce jobs a step); default 4 x threads.
    #[arg(long)]
    parts: Option<u32>,
    /// Print one JSON object instead of lines.
    #[arg(long)]
    json: bool,
}

/// Parses `2xC` or `Cx2` into C.
fn parse_boxes(text: &str) -> Result<usize, String> {
    let bad = || format!("{text:?} is not 2xC or Cx2 with C from {} to {}", shapes::MIN_C, shapes::MAX_C);
    let (r, c) = text.split_once(['x', 'X']).ok_or_else(bad)?;
    let (r, c): (usize, usize) = (r.trim().parse().map_err(|_| bad())?, c.trim().parse().map_err(|_| bad())?);
    let c = if r == 2 {
        c
    } else if c == 2 {
        r
    } else {
        return Err(bad());
    };
    if (shapes::MIN_C..=shapes::MAX_C).contains(&c) { Ok(c) } else { Err(bad()) }
}

#[derive(Serialize)]
struct LayerRow {
    layer: usize,
    states: u64,
    /// Emissions that built this layer from the one before (0 for layer 1).
    emissions: u64,
    /// Bytes of the layer's part files.
    bytes: u64,
    /// Bytes the step's map jobs wrote for its reduce jobs to read.
    shuffle_bytes: u64,
    seconds: f64,
}

#[derive(Serialize)]
struct Report {
    boxes: String,
    /// The census the jobs belong to (`layers boxes=2xC shards=S parts=P`).
    census: String,
    layers: Vec<LayerRow>,
    /// At the last layer: the number of column-set classes.
    classes: Option<usize>,
    /// At the last layer: the number of grids, in decimal.
    grids: Option<String>,
    /// Whether `grids` equals the published total.
    published: Option<bool>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let c = args.boxes;
    let to_layer = args.to_layer.unwrap_or(c);
    if !(1..=c).contains(&to_layer) {
        return Err(UsageError(format!("--to-layer {to_layer}: 2x{c} has layers 1 to {c}")).into());
    }
    let threads = args.threads as usize;
    let (shards, parts) = (args.shards.unwrap_or(4 * args.threads), args.parts.unwrap_or(4 * args.threads));
    let census = Census::new(Layers { c, shards, parts }).map_err(|e| UsageError(e.to_string()))?;
    let temporary = match &args.dir {
        Some(_) => None,
        None => Some(tempfile::Builder::new().prefix("census-layers.").tempdir()?),
    };
    let root = args.dir.clone().unwrap_or_else(|| temporary.as_ref().expect("made above").path().to_path_buf());
    let plane = Plane::new(census, &root)?;
    // Never set here: the flag is for callers that stop a count part-way.
    let cancel = AtomicBool::new(false);
    let json = args.json;
    let mut rows = Vec::new();
    let run = local::run(&plane, to_layer, threads, &cancel, &mut |layer: &LayerSummary| {
        let row = LayerRow {
            layer: layer.layer,
            states: layer.states,
            emissions: layer.emissions,
            bytes: layer.bytes,
            shuffle_bytes: layer.shuffle_bytes,
            seconds: layer.seconds,
        };
        if !json {
            println!(
                "layer {}: {} states, {} emissions, {:.2} s, {} bytes ({} bytes of shuffle)",
                row.layer,
                thousands(&row.states),
                thousands(&row.emissions),
                row.seconds,
                thousands(&row.bytes),
                thousands(&row.shuffle_bytes),
            );
        }
        rows.push(row);
    })?;
    let mut report = Report {
        boxes: format!("2x{c}"),
        census: census.to_string(),
        layers: rows,
        classes: None,
        grids: None,
        published: None,
    };
    if let (Some(classes), Some(answer)) = (&run.classes, &run.answer) {
        let grids = answer.value.to_string();
        let published = shapes::PUBLISHED_GRIDS.iter().any(|&(pc, total)| pc == c && total == grids);
        if !json {
            println!(
                "2x{c}: {} classes, {grids} grids ({})",
                classes.len(),
                if published { "the published total" } else { "NOT the published total" }
            );
        }
        (report.classes, report.grids, report.published) = (Some(classes.len()), Some(grids), Some(published));
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    drop(temporary);
    Ok(if report.published == Some(false) { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_parse_both_ways_and_refuse_the_rest() {
        assert_eq!(parse_boxes("2x5"), Ok(5));
        assert_eq!(parse_boxes("6x2"), Ok(6));
        for bad in ["3x3", "2x7", "2x1", "2", "2xq", ""] {
            assert!(parse_boxes(bad).is_err(), "{bad}");
        }
    }
}
