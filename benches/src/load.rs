//! The machine's load during a run, for the report's header: a benchmark on a shared machine
//! measures the other work too, and a reader needs to know whether it did.

/// The 1-minute load average, sampled before each point and at the end of the run.
#[derive(Debug, Default, Clone)]
pub struct LoadSamples {
    samples: Vec<f64>,
}

impl LoadSamples {
    /// Reads `/proc/loadavg` (its first field); a machine without it adds nothing.
    pub fn sample(&mut self) {
        if let Some(v) = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|t| parse_loadavg(&t))
        {
            self.samples.push(v);
        }
    }

    /// The header line: min, median and max of the samples, and the cores they share; `None`
    /// without samples.
    pub fn summary(&self, cores: usize) -> Option<String> {
        let mut s = self.samples.clone();
        s.sort_by(f64::total_cmp);
        let (first, last) = (s.first()?, s.last()?);
        Some(format!(
            "1-minute load average before each point: min {first:.2}, median {:.2}, max {last:.2} ({} samples, {cores} cores)",
            s[s.len() / 2],
            s.len()
        ))
    }
}

/// The first field of `/proc/loadavg`'s text.
fn parse_loadavg(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_gives_min_median_max_and_the_cores() {
        let mut l = LoadSamples::default();
        assert_eq!(l.summary(2), None);
        l.samples = vec![3.5, 0.25, 1.0];
        assert_eq!(
            l.summary(2).as_deref(),
            Some("1-minute load average before each point: min 0.25, median 1.00, max 3.50 (3 samples, 2 cores)")
        );
        assert_eq!(parse_loadavg("0.61 1.62 3.09 2/345 6789\n"), Some(0.61));
        assert_eq!(parse_loadavg(""), None);
    }
}
