//! Event timing and result rows.

use kv_canary::cuda::{Event, Stream};
use kv_canary::Error;
use kv_canary_testkit::floors::{Floors, L2Flush};

/// Median and spread of one timing, microseconds.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub median_us: f64,
    pub p10_us: f64,
    pub p90_us: f64,
}

/// What runs on the stream before each timed repetition (outside the timed region).
#[derive(Clone, Copy)]
pub enum Lead<'f> {
    /// Nothing: the stream is idle when the start event is queued, so the timed region also
    /// holds whatever part of the host's submission the GPU waits for ("idle").
    Idle,
    /// A kernel spinning for [`SPIN_NS`]: the host has queued the whole repetition before the
    /// GPU reaches its start event, so the region times the device's work alone ("queued").
    Spin(&'f Floors),
    /// A write of a buffer larger than the L2 (cold L2); it also keeps the GPU busy.
    Flush(&'f L2Flush),
}

/// How long [`Lead::Spin`] holds the GPU: far more than the host needs to queue a repetition.
pub const SPIN_NS: u64 = 30_000;

/// Times `op` `reps` times after `warmup` untimed runs, each between two events on `stream`,
/// each after `lead`.
pub fn time(
    stream: &Stream,
    lead: Lead<'_>,
    warmup: usize,
    reps: usize,
    mut op: impl FnMut() -> Result<(), Error>,
) -> Result<Stats, Error> {
    for _ in 0..warmup {
        op()?;
    }
    let events: Vec<(Event, Event)> = (0..reps)
        .map(|_| Ok((Event::new(stream.gpu())?, Event::new(stream.gpu())?)))
        .collect::<Result<_, Error>>()?;
    for (start, stop) in &events {
        match lead {
            Lead::Idle => {}
            Lead::Spin(floors) => floors.spin(stream, SPIN_NS)?,
            Lead::Flush(f) => f.queue(stream)?,
        }
        stream.record(start)?;
        op()?;
        stream.record(stop)?;
    }
    stream.synchronize()?;
    let mut us: Vec<f64> = events
        .iter()
        .map(|(a, b)| b.elapsed_ms(a).map(|ms| f64::from(ms) * 1e3))
        .collect::<Result<_, Error>>()?;
    us.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
    Ok(Stats {
        median_us: at(0.5),
        p10_us: at(0.1),
        p90_us: at(0.9),
    })
}

/// The graph-replay timings of one workload, warm L2 idle and queued, and cold L2.
pub struct Replays {
    pub warm: Stats,
    pub queued: Stats,
    pub cold: Stats,
}

/// Times `replay` on `stream` three ways: warm L2 with the stream idle ([`Lead::Idle`]) and
/// queued ([`Lead::Spin`]), `reps` each after `warmup` untimed runs, then cold L2
/// ([`Lead::Flush`] with `flush`, at most 100 repetitions).
pub fn replays(
    stream: &Stream,
    floors: &Floors,
    flush: &L2Flush,
    warmup: usize,
    reps: usize,
    mut replay: impl FnMut() -> Result<(), Error>,
) -> Result<Replays, Error> {
    Ok(Replays {
        warm: time(stream, Lead::Idle, warmup, reps, &mut replay)?,
        queued: time(stream, Lead::Spin(floors), warmup, reps, &mut replay)?,
        cold: time(stream, Lead::Flush(flush), 3, reps.min(100), &mut replay)?,
    })
}

/// One result line.
#[derive(Clone, Debug)]
pub struct Row {
    pub op: &'static str,
    pub workload: String,
    pub entries: u64,
    pub mode: &'static str,
    pub l2: &'static str,
    pub stats: Stats,
    pub sglang_us: Option<f64>,
    pub target_us: Option<f64>,
}

impl Row {
    pub const CSV_HEADER: &'static str =
        "op,workload,entries,mode,l2,median_us,p10_us,p90_us,entries_per_s,sglang_graph_us,target_us";

    pub fn floor(op: &'static str, workload: &str, entries: u64, us: f64) -> Row {
        Row {
            op,
            workload: workload.into(),
            entries,
            mode: "floor",
            l2: "-",
            stats: Stats {
                median_us: us,
                p10_us: us,
                p90_us: us,
            },
            sglang_us: None,
            target_us: None,
        }
    }

    pub fn csv(&self) -> String {
        let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v}"));
        format!(
            "{},\"{}\",{},{},{},{:.2},{:.2},{:.2},{:.4e},{},{}",
            self.op,
            self.workload,
            self.entries,
            self.mode,
            self.l2,
            self.stats.median_us,
            self.stats.p10_us,
            self.stats.p90_us,
            self.entries as f64 / (self.stats.median_us * 1e-6),
            opt(self.sglang_us),
            opt(self.target_us)
        )
    }

    pub fn json(&self) -> String {
        let opt = |v: Option<f64>| v.map_or("null".to_string(), |v| format!("{v}"));
        format!(
            "{{\"op\":\"{}\",\"workload\":\"{}\",\"entries\":{},\"mode\":\"{}\",\"l2\":\"{}\",\"median_us\":{:.3},\"p10_us\":{:.3},\"p90_us\":{:.3},\"sglang_graph_us\":{},\"target_us\":{}}}",
            self.op,
            self.workload,
            self.entries,
            self.mode,
            self.l2,
            self.stats.median_us,
            self.stats.p10_us,
            self.stats.p90_us,
            opt(self.sglang_us),
            opt(self.target_us)
        )
    }
}

/// Prints a table of rows: graph idle / queued / cold, eager, SGLang and target per workload.
/// The verdicts compare the target with the idle graph replay (the method) and with
/// the queued one (the device's time alone).
pub fn print_table(title: &str, rows: &[Row]) {
    println!("\n{title}");
    println!(
        "  {:<44} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7}  verdict (idle, queued)",
        "workload", "entries", "graph us", "queued", "cold us", "eager us", "SGLang", "target"
    );
    let mut names: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.mode != "floor") {
        if !names.contains(&r.workload.as_str()) {
            names.push(&r.workload);
        }
    }
    for name in names {
        let get = |mode: &str, l2: &str| {
            rows.iter()
                .find(|r| r.workload == name && r.mode == mode && r.l2 == l2)
        };
        let (g, q, c, e) = (
            get("graph", "warm"),
            get("queued", "warm"),
            get("graph", "cold"),
            get("eager", "warm"),
        );
        let us =
            |r: Option<&Row>| r.map_or("-".to_string(), |r| format!("{:.1}", r.stats.median_us));
        let any = g.or(q).or(e).or(c).expect("a row");
        let verdict = |r: Option<&Row>| match (r, any.target_us) {
            (Some(r), Some(t)) if r.stats.median_us <= t => "meets",
            (Some(_), Some(_)) => "MISSES",
            _ => "",
        };
        println!(
            "  {:<44} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7}  {} {}",
            name,
            any.entries,
            us(g),
            us(q),
            us(c),
            us(e),
            any.sglang_us.map_or("-".into(), |v| format!("{v}")),
            any.target_us.map_or("-".into(), |v| format!("{v}")),
            verdict(g),
            verdict(q),
        );
    }
}
