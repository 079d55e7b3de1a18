//! The top band of a grid: rows 1-3, blocks B1, B2, B3.

use std::fmt;
use std::str::FromStr;

/// A 3x9 band, stored row by row as digits 1-9.
///
/// A `Band` is always valid: each of its rows and each of its three blocks
/// holds every digit 1-9 once. The only ways to build one are [`Band::parse`]
/// (and `FromStr`) and [`Band::from_cells`], which check exactly that.
///
/// ```
/// use census_math::Band;
/// let band: Band = "123456789456789123789123456".parse().unwrap();
/// assert_eq!(band.cell(1, 0), 4);
/// assert_eq!(band.to_string(), "123456789456789123789123456");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Band {
    // Row-major; the derived `Ord` is therefore the plain string order of the
    // 27-digit form, which is the order class representatives are chosen by.
    cells: [u8; 27],
}

/// Why a 27-digit text or a cell array is not a valid band.
///
/// Rows, columns and blocks are numbered from 1, as a person reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BandError {
    /// The text does not have 27 characters.
    Length { found: usize },
    /// A character is not one of the digits 1-9.
    NotADigit { row: usize, column: usize, found: char },
    /// A row holds the same digit twice.
    RowRepeat { row: usize, digit: u8 },
    /// A block (B1, B2 or B3) holds the same digit twice.
    BlockRepeat { block: usize, digit: u8 },
}

impl fmt::Display for BandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BandError::Length { found } => {
                write!(f, "a band has 27 digits (rows 1-3, left to right), found {found} characters")
            }
            BandError::NotADigit { row, column, found } => {
                write!(f, "row {row}, column {column}: {found:?} is not a digit 1-9")
            }
            BandError::RowRepeat { row, digit } => write!(f, "row {row} holds the digit {digit} twice"),
            BandError::BlockRepeat { block, digit } => {
                write!(f, "block B{block} holds the digit {digit} twice")
            }
        }
    }
}

impl std::error::Error for BandError {}

impl Band {
    /// Parses and validates the 27-digit form, row 1 then row 2 then row 3.
    pub fn parse(text: &str) -> Result<Band, BandError> {
        let chars: Vec<char> = text.chars().collect();
        if chars.len() != 27 {
            return Err(BandError::Length { found: chars.len() });
        }
        let mut cells = [0u8; 27];
        for (i, &ch) in chars.iter().enumerate() {
            match ch.to_digit(10) {
                Some(d @ 1..=9) => cells[i] = d as u8,
                _ => return Err(BandError::NotADigit { row: i / 9 + 1, column: i % 9 + 1, found: ch }),
            }
        }
        Band::from_cells(cells)
    }

    /// Validates a row-major array of 27 digits 1-9.
    pub fn from_cells(cells: [u8; 27]) -> Result<Band, BandError> {
        // One pass of bit masks settles a valid band (the catalogue makes
        // tens of thousands); only an invalid one is searched for its error.
        let (mut rows, mut blocks) = ([0u32; 3], [0u32; 3]);
        for (i, &d) in cells.iter().enumerate() {
            let bit = 1u32 << d.min(31); // anything above 9 spoils the mask
            rows[i / 9] |= bit;
            blocks[i % 9 / 3] |= bit;
        }
        if rows.iter().chain(&blocks).all(|&mask| mask == 0b11_1111_1110) {
            return Ok(Band { cells });
        }
        for (i, &d) in cells.iter().enumerate() {
            if !(1..=9).contains(&d) {
                let found = char::from_digit(u32::from(d), 10).unwrap_or('?');
                return Err(BandError::NotADigit { row: i / 9 + 1, column: i % 9 + 1, found });
            }
        }
        for row in 0..3 {
            if let Some(digit) = first_repeat((0..9).map(|c| cells[row * 9 + c])) {
                return Err(BandError::RowRepeat { row: row + 1, digit });
            }
        }
        for block in 0..3 {
            let digits = (0..3).flat_map(|r| (0..3).map(move |c| cells[r * 9 + block * 3 + c]));
            if let Some(digit) = first_repeat(digits) {
                return Err(BandError::BlockRepeat { block: block + 1, digit });
            }
        }
        Ok(Band { cells })
    }

    /// A band from cells the caller built valid (the catalogue makes tens
    /// of thousands, each valid by construction); checked in debug builds.
    pub(crate) fn from_valid_cells(cells: [u8; 27]) -> Band {
        debug_assert!(Band::from_cells(cells).is_ok(), "{cells:?} is not a valid band");
        Band { cells }
    }

    /// The digit at `row` (0-2) and `column` (0-8).
    #[inline]
    pub fn cell(&self, row: usize, column: usize) -> u8 {
        self.cells[row * 9 + column]
    }

    /// The 27 digits, row by row.
    #[inline]
    pub fn cells(&self) -> &[u8; 27] {
        &self.cells
    }

    /// Whether B1 is 123/456/789.
    pub fn is_standard(&self) -> bool {
        (0..3).all(|r| (0..3).all(|c| self.cell(r, c) as usize == r * 3 + c + 1))
    }

    /// The set of digits in `column` (0-8), as a bit mask with bit `d` for digit `d`.
    #[inline]
    pub fn column_mask(&self, column: usize) -> u16 {
        (0..3).fold(0, |mask, r| mask | 1 << self.cell(r, column))
    }
}

fn first_repeat(digits: impl Iterator<Item = u8>) -> Option<u8> {
    let mut seen = 0u16;
    for d in digits {
        if seen & 1 << d != 0 {
            return Some(d);
        }
        seen |= 1 << d;
    }
    None
}

impl FromStr for Band {
    type Err = BandError;
    fn from_str(text: &str) -> Result<Band, BandError> {
        Band::parse(text)
    }
}

impl fmt::Display for Band {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &d in &self.cells {
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Band {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Band({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_the_example_band() {
        let text = "123456789456789123789123456";
        let band = Band::parse(text).unwrap();
        assert_eq!(band.to_string(), text);
        assert!(band.is_standard());
    }

    #[test]
    fn names_what_is_wrong() {
        assert_eq!(Band::parse("123"), Err(BandError::Length { found: 3 }));
        assert_eq!(
            Band::parse("12345678945678912378912345x"),
            Err(BandError::NotADigit { row: 3, column: 9, found: 'x' })
        );
        assert_eq!(Band::parse("123456789456789123789123455"), Err(BandError::RowRepeat { row: 3, digit: 5 }));
        assert_eq!(Band::parse("123456789123456789456789123"), Err(BandError::BlockRepeat { block: 1, digit: 1 }));
        // 17 would be 1 again in a mask of 16 bits.
        let mut cells = *Band::parse("123456789456789123789123456").unwrap().cells();
        cells[0] = 17;
        assert_eq!(Band::from_cells(cells), Err(BandError::NotADigit { row: 1, column: 1, found: '?' }));
    }
}
