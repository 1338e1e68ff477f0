//! Next-token selection: greedy argmax, or temperature + top-k + top-p sampling with a seeded PRNG.

use anyhow::{Result, bail, ensure};

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny, well-mixed 64-bit PRNG; the same seed gives the same stream.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Sampling settings. `temperature <= 0` means greedy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = no limit).
    pub top_k: usize,
    /// Keep the smallest most-likely set whose probability reaches top_p (>= 1 = no limit).
    pub top_p: f32,
}

impl SamplingParams {
    #[cfg(test)]
    pub const GREEDY: Self = Self { temperature: 0.0, top_k: 0, top_p: 1.0 };

    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.temperature.is_finite() && self.temperature >= 0.0,
            "--temperature {} must be >= 0",
            self.temperature
        );
        ensure!(self.top_p > 0.0 && self.top_p <= 1.0, "--top-p {} must be in (0, 1]", self.top_p);
        Ok(())
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }
}

/// The index of the largest logit; ties go to the lowest index (like numpy/torch argmax). NaNs are ignored.
pub fn argmax(logits: &[f32]) -> Option<usize> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if l.is_nan() {
            continue;
        }
        if best.is_none_or(|(_, b)| l > b) {
            best = Some((i, l));
        }
    }
    best.map(|(i, _)| i)
}

/// The distribution sampling draws from: (token, probability) pairs, most likely first (ties: lower id first),
/// probabilities summing to 1. Steps: logits / temperature → keep the `top_k` largest → softmax → keep the
/// shortest prefix whose cumulative probability reaches `top_p` (at least one token) → renormalise.
/// NaN and −inf logits never get probability. `temperature` must be > 0.
pub fn distribution(logits: &[f32], p: &SamplingParams) -> Result<Vec<(u32, f64)>> {
    ensure!(p.temperature > 0.0, "distribution() needs a temperature > 0");
    // +inf logits: all the mass goes to them (split evenly).
    let infinite: Vec<u32> = (0..logits.len()).filter(|&i| logits[i] == f32::INFINITY).map(|i| i as u32).collect();
    if !infinite.is_empty() {
        let k = if p.top_k > 0 { infinite.len().min(p.top_k) } else { infinite.len() };
        return Ok(infinite[..k].iter().map(|&i| (i, 1.0 / k as f64)).collect());
    }
    let t = f64::from(p.temperature);
    let mut cand: Vec<(u32, f64)> =
        logits.iter().enumerate().filter(|(_, l)| l.is_finite()).map(|(i, &l)| (i as u32, f64::from(l) / t)).collect();
    if cand.is_empty() {
        bail!("every logit is NaN or -inf: nothing to sample");
    }
    let order = |a: &(u32, f64), b: &(u32, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if p.top_k > 0 && p.top_k < cand.len() {
        cand.select_nth_unstable_by(p.top_k - 1, order);
        cand.truncate(p.top_k);
    }
    cand.sort_unstable_by(order);
    let max = cand[0].1;
    let mut sum = 0.0;
    for c in &mut cand {
        c.1 = (c.1 - max).exp();
        sum += c.1;
    }
    for c in &mut cand {
        c.1 /= sum;
    }
    if p.top_p < 1.0 {
        let top_p = f64::from(p.top_p);
        let mut cum = 0.0;
        let mut keep = cand.len();
        for (i, c) in cand.iter().enumerate() {
            cum += c.1;
            // a small slack so that e.g. 0.5 + 0.3 + 0.2 counts as reaching 1.0 despite rounding
            if cum >= top_p - 1e-12 {
                keep = i + 1;
                break;
            }
        }
        cand.truncate(keep);
        let kept: f64 = cand.iter().map(|c| c.1).sum();
        for c in &mut cand {
            c.1 /= kept;
        }
    }
    Ok(cand)
}

/// The repetition penalty (as llama.cpp's `--repeat-penalty`, after the CTRL paper): each distinct token among the
/// last `last_n` ids (prompt and answer) has its logit divided by `penalty` when positive, multiplied when
/// negative, before greedy choice or sampling. `penalty` 1 = off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RepeatPenalty {
    pub penalty: f32,
    pub last_n: usize,
}

impl RepeatPenalty {
    pub const OFF: Self = Self { penalty: 1.0, last_n: 0 };

    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.penalty.is_finite() && self.penalty > 0.0,
            "--repeat-penalty {} must be > 0 (1 = off, 1.1 a common choice)",
            self.penalty
        );
        Ok(())
    }

    fn is_off(&self) -> bool {
        self.penalty == 1.0 || self.last_n == 0
    }

    /// `logits` with the penalty applied over the last `last_n` of `history`.
    pub fn apply(&self, logits: &[f32], history: &[u32]) -> Vec<f32> {
        let mut out = logits.to_vec();
        let recent = &history[history.len().saturating_sub(self.last_n)..];
        let mut seen = std::collections::HashSet::with_capacity(recent.len());
        for &t in recent {
            if let Some(l) = out.get_mut(t as usize)
                && seen.insert(t)
            {
                *l = if *l > 0.0 { *l / self.penalty } else { *l * self.penalty };
            }
        }
        out
    }
}

/// Picks next tokens from logits.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    penalty: RepeatPenalty,
    rng: SplitMix64,
}

impl Sampler {
    pub fn new(params: SamplingParams, seed: u64) -> Result<Self> {
        params.validate()?;
        Ok(Self { params, penalty: RepeatPenalty::OFF, rng: SplitMix64::new(seed) })
    }

    /// With a repetition penalty (applied by [`Sampler::sample_after`]).
    pub fn with_repeat_penalty(mut self, penalty: RepeatPenalty) -> Result<Self> {
        penalty.validate()?;
        self.penalty = penalty;
        Ok(self)
    }

    /// The next token for one position's logits, after the ids in `history` (prompt and answer so far), which
    /// the repetition penalty looks at.
    pub fn sample_after(&mut self, logits: &[f32], history: &[u32]) -> Result<u32> {
        if self.penalty.is_off() {
            self.sample(logits)
        } else {
            let penalized = self.penalty.apply(logits, history);
            self.sample(&penalized)
        }
    }

    /// The next token for one position's logits.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32> {
        if self.params.is_greedy() {
            return match argmax(logits) {
                Some(i) => Ok(i as u32),
                None => bail!("every logit is NaN: the model produced no usable output"),
            };
        }
        let dist = distribution(logits, &self.params)?;
        let u = self.rng.next_f64();
        let mut cum = 0.0;
        for &(tok, prob) in &dist {
            cum += prob;
            if u < cum {
                return Ok(tok);
            }
        }
        Ok(dist.last().map(|d| d.0).unwrap_or(0)) // u within rounding of 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32, top_k: usize, top_p: f32) -> SamplingParams {
        SamplingParams { temperature, top_k, top_p }
    }

    #[test]
    fn greedy_is_argmax_with_ties_to_lowest_index() {
        let mut s = Sampler::new(SamplingParams::GREEDY, 1).unwrap();
        assert_eq!(s.sample(&[0.1, 3.0, -2.0, 2.9]).unwrap(), 1);
        assert_eq!(s.sample(&[1.0, 5.0, 5.0, 5.0]).unwrap(), 1);
        assert_eq!(s.sample(&[f32::NAN, -1.0, -0.5]).unwrap(), 2);
        assert_eq!(s.sample(&[f32::NEG_INFINITY, f32::NEG_INFINITY]).unwrap(), 0);
        assert!(s.sample(&[f32::NAN, f32::NAN]).is_err());
        assert!(s.sample(&[]).is_err());
    }

    #[test]
    fn repeat_penalty_pushes_recent_tokens_down_once_each() {
        let p = RepeatPenalty { penalty: 2.0, last_n: 3 };
        // token 1 (recent, twice: penalised once), token 2 (negative: multiplied), token 0 (too old: untouched)
        let out = p.apply(&[4.0, 3.0, -1.0, 1.0], &[0, 1, 2, 1]);
        assert_eq!(out, vec![4.0, 1.5, -2.0, 1.0]);
        // ids beyond the logits are ignored, an empty history changes nothing
        assert_eq!(p.apply(&[1.0, 2.0], &[7]), vec![1.0, 2.0]);
        assert_eq!(p.apply(&[1.0, 2.0], &[]), vec![1.0, 2.0]);
        // greedy: without the penalty token 1 wins; with it, after 1 was just said, token 3 does
        let logits = [0.0f32, 3.0, 0.5, 2.0];
        let mut plain = Sampler::new(SamplingParams::GREEDY, 1).unwrap();
        assert_eq!(plain.sample_after(&logits, &[1]).unwrap(), 1, "penalty off by default");
        let mut s = Sampler::new(SamplingParams::GREEDY, 1).unwrap().with_repeat_penalty(p).unwrap();
        assert_eq!(s.sample_after(&logits, &[1]).unwrap(), 3);
        assert_eq!(s.sample_after(&logits, &[]).unwrap(), 1);
        for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            let e = Sampler::new(SamplingParams::GREEDY, 1)
                .unwrap()
                .with_repeat_penalty(RepeatPenalty { penalty: bad, last_n: 64 })
                .unwrap_err();
            assert!(e.to_string().contains("--repeat-penalty"), "{e}");
        }
    }

    #[test]
    fn softmax_with_temperature() {
        let logits = [0.0f32, 1.0, 2.0];
        for t in [0.5f32, 1.0, 2.0] {
            let d = distribution(&logits, &params(t, 0, 1.0)).unwrap();
            let z: f64 = logits.iter().map(|&l| (f64::from(l) / f64::from(t)).exp()).sum();
            assert_eq!(d.iter().map(|x| x.0).collect::<Vec<_>>(), vec![2, 1, 0]);
            for &(i, p) in &d {
                let want = (f64::from(logits[i as usize]) / f64::from(t)).exp() / z;
                assert!((p - want).abs() < 1e-12, "t={t} token {i}: {p} vs {want}");
            }
        }
        // lower temperature sharpens
        let cold = distribution(&logits, &params(0.25, 0, 1.0)).unwrap()[0].1;
        let hot = distribution(&logits, &params(4.0, 0, 1.0)).unwrap()[0].1;
        assert!(cold > 0.95 && hot < 0.45, "cold {cold} hot {hot}");
    }

    #[test]
    fn top_k_keeps_the_k_largest() {
        let logits = [0.5f32, 3.0, -1.0, 2.0, 2.0, f32::NAN];
        let d = distribution(&logits, &params(1.0, 2, 1.0)).unwrap();
        assert_eq!(d.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 3]); // tie 3/4: lower id kept
        let z = 3f64.exp() + 2f64.exp();
        assert!((d[0].1 - 3f64.exp() / z).abs() < 1e-12);
        assert!((d.iter().map(|x| x.1).sum::<f64>() - 1.0).abs() < 1e-12);
        // k larger than the vocabulary: everything finite
        assert_eq!(distribution(&logits, &params(1.0, 100, 1.0)).unwrap().len(), 5);
        let d1 = distribution(&logits, &params(1.0, 1, 1.0)).unwrap();
        assert_eq!(d1, vec![(1, 1.0)]);
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_p() {
        // probabilities 0.5, 0.25, 0.125, 0.125 (logits = ln p)
        let logits: Vec<f32> = [0.5f64, 0.25, 0.125, 0.125].iter().map(|p| p.ln() as f32).collect();
        let ids = |p: f32| distribution(&logits, &params(1.0, 0, p)).unwrap().iter().map(|x| x.0).collect::<Vec<_>>();
        assert_eq!(ids(0.3), vec![0]);
        assert_eq!(ids(0.5), vec![0]);
        assert_eq!(ids(0.6), vec![0, 1]);
        assert_eq!(ids(0.75), vec![0, 1]);
        assert_eq!(ids(0.8), vec![0, 1, 2]);
        assert_eq!(ids(1.0), vec![0, 1, 2, 3]);
        let d = distribution(&logits, &params(1.0, 0, 0.6)).unwrap();
        assert!((d[0].1 - 2.0 / 3.0).abs() < 1e-6 && (d[1].1 - 1.0 / 3.0).abs() < 1e-6, "{d:?}");
        // top-k applies first, then top-p on the renormalised top-k
        let d = distribution(&logits, &params(1.0, 2, 0.7)).unwrap(); // top-2 probs 2/3, 1/3
        assert_eq!(d.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1]);
        let d = distribution(&logits, &params(1.0, 2, 0.6)).unwrap();
        assert_eq!(d, vec![(0, 1.0)]);
    }

    #[test]
    fn infinite_logits() {
        let d = distribution(&[1.0, f32::INFINITY, 0.0, f32::INFINITY], &params(1.0, 0, 1.0)).unwrap();
        assert_eq!(d, vec![(1, 0.5), (3, 0.5)]);
        assert!(distribution(&[f32::NEG_INFINITY, f32::NAN], &params(1.0, 0, 1.0)).is_err());
    }

    #[test]
    fn invalid_params() {
        assert!(Sampler::new(params(-1.0, 0, 1.0), 0).is_err());
        assert!(Sampler::new(params(1.0, 0, 0.0), 0).is_err());
        assert!(Sampler::new(params(1.0, 0, 1.5), 0).is_err());
        assert!(Sampler::new(params(f32::NAN, 0, 1.0), 0).is_err());
    }

    fn draw(seed: u64, p: SamplingParams, logits: &[f32], n: usize) -> Vec<u32> {
        let mut s = Sampler::new(p, seed).unwrap();
        (0..n).map(|_| s.sample(logits).unwrap()).collect()
    }

    #[test]
    fn same_seed_same_tokens() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 37 % 11) as f32) * 0.3).collect();
        let p = params(0.8, 20, 0.95);
        assert_eq!(draw(42, p, &logits, 200), draw(42, p, &logits, 200));
        assert_ne!(draw(42, p, &logits, 200), draw(43, p, &logits, 200));
    }

    #[test]
    fn splitmix_known_values_and_range() {
        // Reference values of SplitMix64 seeded with 0 (as in the paper's / Vigna's C code).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut r = SplitMix64::new(7);
        for _ in 0..10_000 {
            let u = r.next_f64();
            assert!((0.0..1.0).contains(&u));
        }
    }

    #[test]
    fn empirical_distribution_matches() {
        let probs = [0.5f64, 0.3, 0.15, 0.05];
        let logits: Vec<f32> = probs.iter().map(|p| p.ln() as f32).collect();
        let n = 100_000;
        let mut counts = [0usize; 4];
        for t in draw(9, params(1.0, 0, 1.0), &logits, n) {
            counts[t as usize] += 1;
        }
        for (i, &p) in probs.iter().enumerate() {
            let f = counts[i] as f64 / n as f64;
            // 5 standard deviations of a binomial proportion
            let tol = 5.0 * (p * (1.0 - p) / n as f64).sqrt();
            assert!((f - p).abs() < tol, "token {i}: frequency {f}, probability {p}");
        }
        // with top-k 2 only tokens 0 and 1 appear, in ratio 5:3
        let mut counts = [0usize; 4];
        for t in draw(10, params(1.0, 2, 1.0), &logits, n) {
            counts[t as usize] += 1;
        }
        assert_eq!(counts[2] + counts[3], 0);
        let f0 = counts[0] as f64 / n as f64;
        assert!((f0 - 0.625).abs() < 0.01, "{f0}");
    }
}
