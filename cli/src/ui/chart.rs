//! The throughput chart: completed and failed jobs per minute over the last hour, drawn by the
//! server as SVG (no script, no library). A pure function of its points, so it is tested here.
use maud::{Markup, html};

/// One minute of `queue_throughput`, summed over the queues shown.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Minute {
    pub completed: i64,
    pub failed: i64,
}

const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 120.0;
const TOP: f64 = 14.0;

/// A line per series (completed, failed), the y axis scaled to the busiest minute; oldest
/// minute on the left. An empty hour is a flat line at zero, not an empty box.
pub fn throughput(minutes: &[Minute], testid: &str) -> Markup {
    let peak = minutes
        .iter()
        .map(|m| m.completed.max(m.failed))
        .max()
        .unwrap_or(0)
        .max(1);
    let completed = path(minutes.iter().map(|m| m.completed), peak);
    let failed = path(minutes.iter().map(|m| m.failed), peak);
    let total_completed: i64 = minutes.iter().map(|m| m.completed).sum();
    let total_failed: i64 = minutes.iter().map(|m| m.failed).sum();
    html! {
        figure.chart data-testid=(testid) {
            svg xmlns="http://www.w3.org/2000/svg" viewBox={"0 0 " (WIDTH) " " (HEIGHT)}
                role="img" preserveAspectRatio="none" {
                title { (total_completed) " completed, " (total_failed) " failed in the last "
                        (minutes.len()) " minutes" }
                line.axis x1="0" y1=(HEIGHT - 1.0) x2=(WIDTH) y2=(HEIGHT - 1.0) {}
                text.peak x="2" y="11" { (peak) "/min" }
                polyline.completed points=(completed) data-series="completed" {}
                polyline.failed points=(failed) data-series="failed" {}
            }
            figcaption {
                span.completed { "completed " (total_completed) }
                " · "
                span.failed { "failed " (total_failed) }
                " · per minute, last " (minutes.len()) " min"
            }
        }
    }
}

/// SVG polyline points of `values` scaled so that `peak` touches the top margin.
fn path(values: impl ExactSizeIterator<Item = i64>, peak: i64) -> String {
    let n = values.len();
    let step = if n > 1 { WIDTH / (n - 1) as f64 } else { 0.0 };
    let span = HEIGHT - 1.0 - TOP;
    values
        .enumerate()
        .map(|(i, v)| {
            let y = HEIGHT - 1.0 - span * (v as f64 / peak as f64);
            format!("{:.1},{:.1}", i as f64 * step, y)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(completed: i64, failed: i64) -> Minute {
        Minute { completed, failed }
    }

    #[test]
    fn the_busiest_minute_touches_the_top_and_zero_sits_on_the_axis() {
        let points = path([0, 5, 10].into_iter(), 10);
        assert_eq!(points, "0.0,119.0 300.0,66.5 600.0,14.0");
    }

    #[test]
    fn an_idle_hour_is_a_flat_line_and_never_divides_by_zero() {
        let svg = throughput(&[m(0, 0); 60], "t").into_string();
        assert!(
            svg.contains("0 completed, 0 failed in the last 60 minutes"),
            "{svg}"
        );
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        assert!(throughput(&[], "t").into_string().contains("1/min"));
    }

    #[test]
    fn totals_and_the_scale_follow_the_points() {
        let svg = throughput(&[m(3, 1), m(7, 0), m(2, 4)], "t").into_string();
        assert!(
            svg.contains("12 completed, 5 failed in the last 3 minutes"),
            "{svg}"
        );
        assert!(svg.contains(">7/min<"), "{svg}");
        assert!(svg.contains(r#"data-series="failed""#));
    }
}
