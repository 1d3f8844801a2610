//! Event timing and result rows.

use kv_canary::cuda::{floors::L2Flush, Event, Stream};
use kv_canary::Error;

/// Median and spread of one timing, microseconds.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub median_us: f64,
    pub p10_us: f64,
    pub p90_us: f64,
}

/// Times `op` `reps` times after `warmup` untimed runs, each between two events on `stream`;
/// with `flush`, the L2 is flushed before every repetition (outside the timed region).
pub fn time(
    stream: &Stream<'_>,
    flush: Option<&L2Flush>,
    warmup: usize,
    reps: usize,
    mut op: impl FnMut() -> Result<(), Error>,
) -> Result<Stats, Error> {
    for _ in 0..warmup {
        op()?;
    }
    let events: Vec<(Event, Event)> = (0..reps)
        .map(|_| Ok((Event::new()?, Event::new()?)))
        .collect::<Result<_, Error>>()?;
    for (start, stop) in &events {
        if let Some(f) = flush {
            f.queue(stream)?;
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

/// Prints a table of rows: graph warm / cold, eager warm, SGLang and target per workload.
pub fn print_table(title: &str, rows: &[Row]) {
    println!("\n{title}");
    println!(
        "  {:<44} {:>10} {:>10} {:>10} {:>10} {:>8} {:>7}  verdict",
        "workload", "entries", "graph us", "cold us", "eager us", "SGLang", "target"
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
        let (g, c, e) = (
            get("graph", "warm"),
            get("graph", "cold"),
            get("eager", "warm"),
        );
        let us =
            |r: Option<&Row>| r.map_or("-".to_string(), |r| format!("{:.1}", r.stats.median_us));
        let any = g.or(e).or(c).expect("a row");
        let verdict = match (g, any.target_us) {
            (Some(g), Some(t)) if g.stats.median_us <= t => "meets",
            (Some(_), Some(_)) => "MISSES",
            _ => "",
        };
        println!(
            "  {:<44} {:>10} {:>10} {:>10} {:>10} {:>8} {:>7}  {verdict}",
            name,
            any.entries,
            us(g),
            us(c),
            us(e),
            any.sglang_us.map_or("-".into(), |v| format!("{v}")),
            any.target_us.map_or("-".into(), |v| format!("{v}")),
        );
    }
}
