//! The published class stages: which moves join catalogue bands into classes.

use std::fmt;
use std::str::FromStr;

/// A published stage of the reduction from 36,288 catalogue bands to classes
/// of bands with the same number of completions.
///
/// ```
/// use census_math::Stage;
/// let stage: Stage = "44".parse().unwrap();
/// assert_eq!(stage, Stage::Russell);
/// assert_eq!("felgenhauer-jarvis".parse::<Stage>().unwrap().published_classes(), 71);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    /// No moves: every catalogue band is its own class.
    Catalogue,
    /// Stacks and columns.
    StacksColumns,
    /// Stacks, columns and rows.
    Rows,
    /// Stacks, columns, rows and 2x2 rectangles.
    Rectangles,
    /// Stacks, columns, rows, row subsets and column swaps (the paper's 71).
    FelgenhauerJarvis,
    /// Stacks, columns, rows and same column sets (Ed Russell's 44).
    Russell,
}

impl Stage {
    /// Every stage, from the finest to the coarsest.
    pub const ALL: [Stage; 6] = [
        Stage::Catalogue,
        Stage::StacksColumns,
        Stage::Rows,
        Stage::Rectangles,
        Stage::FelgenhauerJarvis,
        Stage::Russell,
    ];

    /// The stage's name, as used on the command line and in the store.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Catalogue => "catalogue",
            Stage::StacksColumns => "stacks-columns",
            Stage::Rows => "rows",
            Stage::Rectangles => "rectangles",
            Stage::FelgenhauerJarvis => "felgenhauer-jarvis",
            Stage::Russell => "russell",
        }
    }

    /// The published number of classes at this stage.
    pub fn published_classes(self) -> usize {
        match self {
            Stage::Catalogue => 36_288,
            Stage::StacksColumns => 2_051,
            Stage::Rows => 416,
            Stage::Rectangles => 174,
            Stage::FelgenhauerJarvis => 71,
            Stage::Russell => 44,
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A stage name or class count that is not one of the published stages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownStage(pub String);

impl fmt::Display for UnknownStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown stage {:?}; choose one of ", self.0)?;
        let choices: Vec<String> =
            Stage::ALL.iter().map(|s| format!("{} ({})", s.published_classes(), s.name())).collect();
        f.write_str(&choices.join(", "))
    }
}

impl std::error::Error for UnknownStage {}

impl FromStr for Stage {
    type Err = UnknownStage;

    /// Accepts a stage's name or its class count, case-insensitively.
    fn from_str(text: &str) -> Result<Stage, UnknownStage> {
        let wanted = text.trim().to_ascii_lowercase().replace(['_', ' '], "-");
        let aliases = |stage: Stage| -> &'static [&'static str] {
            match stage {
                Stage::FelgenhauerJarvis => &["fj"],
                Stage::StacksColumns => &["stacks+columns"],
                Stage::Rows => &["+rows"],
                Stage::Rectangles => &["+rectangles"],
                _ => &[],
            }
        };
        Stage::ALL
            .into_iter()
            .find(|&stage| {
                wanted == stage.name()
                    || wanted == stage.published_classes().to_string()
                    || aliases(stage).contains(&wanted.as_str())
            })
            .ok_or_else(|| UnknownStage(text.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_counts() {
        for stage in Stage::ALL {
            assert_eq!(stage.name().parse::<Stage>(), Ok(stage));
            assert_eq!(stage.published_classes().to_string().parse::<Stage>(), Ok(stage));
        }
        assert_eq!("Russell".parse::<Stage>(), Ok(Stage::Russell));
        let error = "45".parse::<Stage>().unwrap_err().to_string();
        assert!(error.contains("\"45\"") && error.contains("44 (russell)"), "{error}");
    }
}
