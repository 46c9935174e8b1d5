//! `--report FILE.html` on predict, optimize, search and sweep: one self-contained page per
//! run (its charts inline as SVG, no script, no stylesheet or font fetched), the numbers
//! beside them as tables, the command line that produced it and the input files it read.
//!
//! A command adds its parts in reading order: its headline ([`Report::headline`]), charts
//! with the data behind them ([`Report::chart`]), the printed report ([`Report::text`]),
//! its JSON answer as tables ([`Report::tables`]), its inputs ([`Report::input`]); then
//! [`Report::write`].

use std::fmt::Write;
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

/// An HTML report being assembled.
pub(super) struct Report {
    title: String,
    body: String,
    inputs: String,
}

/// `text` with HTML's special characters escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

/// A cell's text: numbers to four significant digits (whole numbers as they are).
fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(f)) if f != 0.0 && (f.abs() >= 1e5 || f.abs() < 1e-3) => {
                format!("{f:.4e}")
            }
            (None, Some(f)) => {
                // Four significant digits, trailing zeros dropped.
                let digits = if f == 0.0 {
                    0
                } else {
                    (3 - f.abs().log10().floor() as i32).max(0) as usize
                };
                let s = format!("{f:.digits$}");
                if s.contains('.') {
                    s.trim_end_matches('0').trim_end_matches('.').to_string()
                } else {
                    s
                }
            }
            _ => n.to_string(),
        },
        Value::Bool(b) => b.to_string(),
        Value::Array(a) if a.iter().all(|x| !x.is_object() && !x.is_array()) => {
            a.iter().map(cell).collect::<Vec<_>>().join(", ")
        }
        other => other.to_string(),
    }
}

/// The opening of an inline chart: the namespace attribute dropped (HTML needs none, and
/// the page then names no address at all), sized to the page's width.
fn inline_svg(svg: &str) -> String {
    svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1)
        .replacen("<svg ", "<svg class=\"chart\" ", 1)
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em auto;max-width:1040px;\
padding:0 1em;color:#222;line-height:1.4}h1{font-size:1.5em;margin-bottom:.2em}\
h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ccc}h3{font-size:1em}\
pre{background:#f6f6f6;padding:.7em;overflow-x:auto;font-size:12px;line-height:1.3}\
code{background:#f0f0f0;padding:.1em .3em;word-break:break-all}\
svg.chart{max-width:100%;height:auto;display:block;margin:.5em 0}\
table{border-collapse:collapse;font-size:12px;margin:.5em 0}\
td,th{border:1px solid #ddd;padding:2px 6px;text-align:right;vertical-align:top}\
th{background:#f0f0f0}td.k,th.k{text-align:left}\
.headline{font-size:1.1em;font-weight:bold;background:#eef4fb;padding:.5em .7em}\
details{margin:.4em 0}summary{cursor:pointer;color:#333}\
.scroll{overflow-x:auto;max-height:480px;overflow-y:auto}";

impl Report {
    /// A report titled `title` of the command line `args` (the program's arguments).
    pub(super) fn new(title: &str, args: &[String]) -> Report {
        let mut body = String::new();
        // Quoted as a POSIX shell reads it back: a word of safe characters as it is, any
        // other in single quotes (a quote inside as '\'').
        let safe = |c: char| c.is_ascii_alphanumeric() || "_-./=:,+@%".contains(c);
        let command: Vec<String> = args
            .iter()
            .map(|a| {
                if !a.is_empty() && a.chars().all(safe) {
                    a.clone()
                } else {
                    format!("'{}'", a.replace('\'', r"'\''"))
                }
            })
            .collect();
        let _ = write!(
            body,
            "<h1>{}</h1><p>Produced by <code>{}</code> (stackflow {}).</p>",
            escape(title),
            escape(&command.join(" ")),
            env!("CARGO_PKG_VERSION")
        );
        Report {
            title: title.to_string(),
            body,
            inputs: String::new(),
        }
    }

    /// A section heading.
    pub(super) fn heading(&mut self, text: &str) {
        let _ = write!(self.body, "<h2>{}</h2>", escape(text));
    }

    /// The answer in a sentence, under the title.
    pub(super) fn headline(&mut self, text: &str) {
        let _ = write!(
            self.body,
            "<p class=\"headline\">{}</p>",
            escape(text.trim())
        );
    }

    /// A paragraph of text.
    pub(super) fn paragraph(&mut self, text: &str) {
        let _ = write!(self.body, "<p>{}</p>", escape(text));
    }

    /// The command's printed report, as printed (under a heading, unfolded).
    pub(super) fn text(&mut self, heading: &str, text: &str) {
        self.heading(heading);
        let _ = write!(self.body, "<pre>{}</pre>", escape(text.trim_end()));
    }

    /// A chart inline (its title is its own), with the CSV data behind it as a table under
    /// it (folded).
    pub(super) fn chart(&mut self, svg: &str, csv: Option<&str>) {
        self.body.push_str(&inline_svg(svg));
        if let Some(csv) = csv {
            self.csv("the data behind the chart", csv);
        }
    }

    /// CSV text as a table, folded under `summary`.
    pub(super) fn csv(&mut self, summary: &str, csv: &str) {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(csv.as_bytes());
        let rows: Vec<Vec<String>> = reader
            .records()
            .filter_map(Result::ok)
            .map(|r| r.iter().map(str::to_string).collect())
            .collect();
        let Some((head, rest)) = rows.split_first() else {
            return;
        };
        let _ = write!(
            self.body,
            "<details><summary>{} ({} rows)</summary><div class=\"scroll\"><table><tr>",
            escape(summary),
            rest.len()
        );
        for h in head {
            let _ = write!(self.body, "<th class=\"k\">{}</th>", escape(h));
        }
        self.body.push_str("</tr>");
        for row in rest {
            self.body.push_str("<tr>");
            for (i, c) in row.iter().enumerate() {
                let class = if i == 0 || c.parse::<f64>().is_err() {
                    " class=\"k\""
                } else {
                    ""
                };
                let _ = write!(self.body, "<td{class}>{}</td>", escape(c));
            }
            self.body.push_str("</tr>");
        }
        self.body.push_str("</table></div></details>");
    }

    /// A JSON answer as tables: its plain fields as one table of name and value, each list
    /// of records as a table of its own (its fields as columns), nested records by path.
    pub(super) fn tables(&mut self, heading: &str, value: &Value) {
        self.heading(heading);
        let mut plain = Vec::new();
        let mut lists = Vec::new();
        flatten("", value, &mut plain, &mut lists);
        if !plain.is_empty() {
            self.body.push_str(
                "<div class=\"scroll\"><table><tr><th class=\"k\">field</th><th>value</th></tr>",
            );
            for (k, v) in &plain {
                let _ = write!(
                    self.body,
                    "<tr><td class=\"k\">{}</td><td>{}</td></tr>",
                    escape(k),
                    escape(v)
                );
            }
            self.body.push_str("</table></div>");
        }
        for (name, rows) in lists {
            let mut columns: Vec<String> = Vec::new();
            for r in rows {
                if let Value::Object(o) = r {
                    for k in o.keys() {
                        if !columns.contains(k) {
                            columns.push(k.clone());
                        }
                    }
                }
            }
            let _ = write!(
                self.body,
                "<h3>{}</h3><div class=\"scroll\"><table><tr>",
                escape(&name)
            );
            for c in &columns {
                let _ = write!(self.body, "<th class=\"k\">{}</th>", escape(c));
            }
            self.body.push_str("</tr>");
            for r in rows {
                self.body.push_str("<tr>");
                for c in &columns {
                    let v = r.get(c).unwrap_or(&Value::Null);
                    let class = if v.is_number() { "" } else { " class=\"k\"" };
                    let _ = write!(self.body, "<td{class}>{}</td>", escape(&cell(v)));
                }
                self.body.push_str("</tr>");
            }
            self.body.push_str("</table></div>");
        }
    }

    /// An input file the command read, shown whole (folded).
    pub(super) fn input(&mut self, name: &str, text: &str) {
        let _ = write!(
            self.inputs,
            "<details><summary>{}</summary><pre>{}</pre></details>",
            escape(name),
            escape(text.trim_end())
        );
    }

    /// The page.
    pub(super) fn html(&self) -> String {
        let inputs = if self.inputs.is_empty() {
            String::new()
        } else {
            format!("<h2>Inputs</h2>{}", self.inputs)
        };
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>{}</title><style>{STYLE}</style></head><body>{}{inputs}</body></html>\n",
            escape(&self.title),
            self.body
        )
    }

    /// Writes the page to `path` atomically.
    pub(super) fn write(&self, path: &Path) -> anyhow::Result<()> {
        crate::config::write_atomic(path, self.html().as_bytes())
            .with_context(|| format!("--report: writing {}", path.display()))
    }
}

/// Splits `value` into plain fields (by dotted path) and lists of records (by path).
fn flatten<'a>(
    path: &str,
    value: &'a Value,
    plain: &mut Vec<(String, String)>,
    lists: &mut Vec<(String, &'a Vec<Value>)>,
) {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match value {
        Value::Object(o) => {
            for (k, v) in o {
                flatten(&join(k), v, plain, lists);
            }
        }
        Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_object) => {
            lists.push((path.to_string(), a));
        }
        other => plain.push((path.to_string(), cell(other))),
    }
}

/// An input file of a command, for its report.
pub(super) enum Input<'a> {
    /// Given on the command line: a file read from disk, else text taken as it is (a
    /// strategy in short form).
    Given(&'a str, Option<&'a Path>),
    /// Not given: the embedded default by this name.
    Default(&'a str, &'a Path),
}

/// Adds the input files a command read to its report.
pub(super) fn add_inputs(report: &mut Report, inputs: &[Input]) {
    for input in inputs {
        match *input {
            Input::Given(_, None) => {}
            Input::Given(what, Some(path)) => {
                let name = format!("{what}: {}", path.display());
                // From disk, or from memory where the Python package put it.
                match crate::config::Source::Disk.read(path) {
                    Ok(text) => report.input(&name, &text),
                    Err(_) => report.input(&name, &path.display().to_string()),
                }
            }
            Input::Default(what, path) => {
                let name = format!("{what}: {} (embedded default)", path.display());
                if let Ok(text) = crate::config::Source::Embedded.read(path) {
                    report.input(&name, &text);
                }
            }
        }
    }
}
