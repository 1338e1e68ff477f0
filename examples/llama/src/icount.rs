//! Region markers for qemu's instruction-counting plugin (scripts/aarch64/qemu-icount-plugin.c, and the exec-log
//! counter for qemus without plugins): a seek on /dev/null to offset `MARK | code`, which the counters recognise
//! by its arguments; code 2s + 1 opens and 2s + 2 closes a region of slot s. Anywhere else it is a harmless seek.
//! `nibble-llama --icount-marks` puts the prefill in slot 0 and the decode steps after the first token in slot 1
//! (scripts/aarch64/icount-llama.sh): session creation, packing and tokenizer loading stay outside both.

use std::fs::File;
use std::io::{Seek, SeekFrom};

use anyhow::{Context, Result};

/// "NIBL" in the offset's high bytes.
const MARK: u64 = 0x4e49_424c_0000;

/// The marked slots of one generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// From the start of the generation to the first sampled token (the prefill and its sampling).
    Prefill = 0,
    /// From the first token to the last (every decode step, its sampling and streaming).
    Decode = 1,
}

/// An open /dev/null whose seeks mark regions, and the slot a generation is in.
pub struct Marker(File, Slot);

impl Marker {
    fn new() -> Result<Self> {
        Ok(Self(File::open("/dev/null").context("opening /dev/null for the icount markers")?, Slot::Prefill))
    }

    /// A token was sampled: the first one ends the prefill's slot and starts the decode steps'.
    pub fn token(&mut self) -> Result<()> {
        if self.1 == Slot::Prefill {
            self.close(Slot::Prefill)?;
            self.open(Slot::Decode)?;
            self.1 = Slot::Decode;
        }
        Ok(())
    }

    /// The generation ended: closes the slot it is in (a prefill without a token stays unclosed: the counters
    /// report the open region and the count is refused).
    pub fn finish(&mut self) -> Result<()> {
        if self.1 == Slot::Decode { self.close(Slot::Decode) } else { Ok(()) }
    }

    fn open(&mut self, slot: Slot) -> Result<()> {
        self.seek(2 * slot as u64 + 1)
    }

    fn close(&mut self, slot: Slot) -> Result<()> {
        self.seek(2 * slot as u64 + 2)
    }

    /// Marks one generation (`--icount-marks`): opens the prefill's slot now; [`Marker::token`] closes it and
    /// opens the decode slot at the first token, [`Marker::finish`] closes the decode slot.
    pub fn generation() -> Result<Self> {
        let mut m = Self::new()?;
        m.open(Slot::Prefill)?;
        Ok(m)
    }

    fn seek(&mut self, code: u64) -> Result<()> {
        self.0.seek(SeekFrom::Start(MARK | code)).context("icount marker")?;
        Ok(())
    }
}
