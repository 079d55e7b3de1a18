//! `census layers`: the 2 x c layer recurrence on this machine, one layer at
//! a time (`census_math::shapes::layers`).

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use census_math::shapes::{self, layers};
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
    states: usize,
    /// Emissions that built this layer from the one before (0 for layer 1).
    emissions: u64,
    seconds: f64,
}

#[derive(Serialize)]
struct Report {
    boxes: String,
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
    // Never set here: the flag is for callers that stop a count part-way.
    let cancel = AtomicBool::new(false);
    let mut rows = Vec::new();
    let mut started = Instant::now();
    let json = args.json;
    let last = layers::layers(c, to_layer, &cancel, &mut |layer| {
        let row = LayerRow {
            layer: layer.rows(),
            states: layer.states().len(),
            emissions: layer.emissions(),
            seconds: started.elapsed().as_secs_f64(),
        };
        if !json {
            println!(
                "layer {}: {} states, {} emissions, {:.2} s",
                row.layer,
                thousands(&row.states),
                thousands(&row.emissions),
                row.seconds
            );
        }
        rows.push(row);
        started = Instant::now();
    })?;
    let mut report = Report { boxes: format!("2x{c}"), layers: rows, classes: None, grids: None, published: None };
    if last.is_complete() {
        let (classes, grids) = layers::finish(&last)?;
        let grids = grids.to_string();
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
