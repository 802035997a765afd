//! A plan drawn as a graph: nodes in layers by the longest chain of dependencies before them
//! (so every edge points down), the nodes of one layer side by side (a fan-out reads across).
//! An edge between neighbouring layers runs straight across the gap between them; an edge that
//! skips layers is routed around them — along the gap below its source to a lane of its own right
//! of every box, down the lane, and along the gap above its target — so no edge passes through a
//! box it does not connect. Each edge has a port of its own on the boxes it joins — the edges into
//! a box spread across its top, the edges out of it across its bottom, in the order of the boxes
//! at their other ends — so a fan-in reads as several arrows arriving at one box and a fan-out as
//! several leaving one, never as one line.
//! Pure: positions from the plan's nodes and edges, no I/O; the template draws them as SVG.

use crate::hash::HashMap;
use crate::plan::StoredNodeStatus;

/// Size of a node's box and the gaps between boxes, in SVG units.
pub const BOX_WIDTH: u32 = 180;
pub const BOX_HEIGHT: u32 = 48;
const GAP_X: u32 = 24;
const GAP_Y: u32 = 40;
const MARGIN: u32 = 8;
/// The space between lanes of edges that skip layers, and between the boxes and the first lane.
const LANE_GAP: u32 = 14;

/// A node to draw.
pub struct Node {
    pub id: String,
    pub label: String,
    pub capability: String,
    /// Its status in the version drawn (a CSS class: `status-<status>`).
    pub status: StoredNodeStatus,
    /// A fork's node that took its output from the parent instead of running.
    pub reused: bool,
}

/// A node with its box's top-left corner.
pub struct Placed {
    pub node: Node,
    pub x: u32,
    pub y: u32,
}

/// An edge from a port on the bottom of one box to a port on the top of another, as the corners
/// of a polyline.
pub struct Line {
    pub points: Vec<(u32, u32)>,
}

impl Line {
    /// The `points` attribute of an SVG polyline.
    pub fn svg_points(&self) -> String {
        self.points.iter().map(|(x, y)| format!("{x},{y}")).collect::<Vec<_>>().join(" ")
    }
}

/// A laid-out graph and the size of its drawing.
pub struct Drawing {
    pub nodes: Vec<Placed>,
    pub lines: Vec<Line>,
    pub width: u32,
    pub height: u32,
}

/// Lays out `nodes` (in plan order) and `edges` (`from` → `to` by node id; edges naming an unknown
/// node, and edges closing a cycle, are left out).
pub fn layout(nodes: Vec<Node>, edges: &[(String, String)]) -> Drawing {
    let index: HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.id.as_str(), i)).collect();
    let known: Vec<(usize, usize)> =
        edges.iter().filter_map(|(from, to)| Some((*index.get(from.as_str())?, *index.get(to.as_str())?))).collect();
    let layers = layers(nodes.len(), &known);
    let mut in_layer: HashMap<usize, u32> = HashMap::default();
    let mut slots = vec![(0, 0); nodes.len()];
    for (i, layer) in layers.iter().enumerate() {
        let column = in_layer.entry(*layer).or_default();
        slots[i] = (*column, u32::try_from(*layer).unwrap_or(u32::MAX));
        *column += 1;
    }
    let position =
        |(column, row): (u32, u32)| (MARGIN + column * (BOX_WIDTH + GAP_X), MARGIN + row * (BOX_HEIGHT + GAP_Y));
    let columns = in_layer.values().copied().max().unwrap_or(0);
    let boxes_right = MARGIN + columns * BOX_WIDTH + columns.saturating_sub(1) * GAP_X;
    let drawn: Vec<(usize, usize)> = known.into_iter().filter(|(from, to)| layers[*from] < layers[*to]).collect();
    let x_of = |node: usize| position(slots[node]).0;
    let outs = ports(&drawn, |(from, to)| (from, x_of(to)));
    let ins = ports(&drawn, |(from, to)| (to, x_of(from)));
    let mut lanes = 0;
    let lines = drawn
        .iter()
        .zip(outs.iter().zip(&ins))
        .map(|((from, to), (out, into))| {
            let (x1, y1) = position(slots[*from]);
            let (x2, y2) = position(slots[*to]);
            let (start, end) = ((x1 + out, y1 + BOX_HEIGHT), (x2 + into, y2));
            if layers[*to] == layers[*from] + 1 {
                return Line { points: vec![start, end] };
            }
            lanes += 1;
            route_around(start, end, boxes_right + lanes * LANE_GAP)
        })
        .collect();
    let rows = layers.iter().max().map_or(0, |deepest| deepest + 1);
    let rows = u32::try_from(rows).unwrap_or(u32::MAX);
    let width = boxes_right + lanes * LANE_GAP + MARGIN;
    let height = 2 * MARGIN + rows * BOX_HEIGHT + rows.saturating_sub(1) * GAP_Y;
    let nodes = nodes
        .into_iter()
        .zip(slots)
        .map(|(node, slot)| {
            let (x, y) = position(slot);
            Placed { node, x, y }
        })
        .collect();
    Drawing { nodes, lines, width, height }
}

/// Each edge's port on one side of a box, as an offset from the box's left: the edges sharing a
/// box (`key` gives the box and the x of the box at the edge's other end) are spread evenly
/// across its width in the order of those x, so they do not cross one another at the box.
fn ports(edges: &[(usize, usize)], key: impl Fn((usize, usize)) -> (usize, u32)) -> Vec<u32> {
    let keys: Vec<(usize, u32)> = edges.iter().map(|&edge| key(edge)).collect();
    let mut order: Vec<usize> = (0..edges.len()).collect();
    order.sort_by_key(|&i| (keys[i], i));
    let mut offsets = vec![BOX_WIDTH / 2; edges.len()];
    for group in order.chunk_by(|&a, &b| keys[a].0 == keys[b].0) {
        let count = u32::try_from(group.len()).unwrap_or(u32::MAX).saturating_add(1);
        for (rank, &edge) in (1..).zip(group) {
            offsets[edge] = BOX_WIDTH.saturating_mul(rank) / count;
        }
    }
    offsets
}

/// An edge that skips layers: along the gap below its source to `lane` (right of every box),
/// down the lane, and along the gap above its target. The gaps between layers hold no box.
fn route_around(start: (u32, u32), end: (u32, u32), lane: u32) -> Line {
    let below = start.1 + GAP_Y / 2;
    let above = end.1 - GAP_Y / 2;
    Line { points: vec![start, (start.0, below), (lane, below), (lane, above), (end.0, above), end] }
}

/// Each node's layer: the length of the longest chain of edges leading to it. Computed in rounds
/// (at most one per node), so a cycle — which a valid plan never has — cannot loop forever.
fn layers(count: usize, edges: &[(usize, usize)]) -> Vec<usize> {
    let mut layer = vec![0; count];
    for _ in 0..count {
        let mut moved = false;
        for &(from, to) in edges {
            if layer[to] <= layer[from] && layer[from] + 1 < count {
                layer[to] = layer[from] + 1;
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    layer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str) -> Node {
        Node {
            id: id.into(),
            label: id.into(),
            capability: "c".into(),
            status: crate::plan::NodeStatus::Pending.into(),
            reused: false,
        }
    }

    fn edge(from: &str, to: &str) -> (String, String) {
        (from.into(), to.into())
    }

    #[test]
    fn a_fan_out_is_drawn_side_by_side_below_its_source() {
        let nodes = ["brief", "a", "b", "c", "merge"].map(node).into();
        let edges =
            [edge("brief", "a"), edge("brief", "b"), edge("brief", "c"), edge("a", "merge"), edge("c", "merge")];
        let drawing = layout(nodes, &edges);
        let at: HashMap<&str, (u32, u32)> = drawing.nodes.iter().map(|p| (p.node.id.as_str(), (p.x, p.y))).collect();
        assert_eq!(at["a"].1, at["b"].1, "one layer");
        assert_eq!(at["b"].1, at["c"].1);
        assert!(at["a"].0 < at["b"].0 && at["b"].0 < at["c"].0, "side by side, in plan order");
        assert!(at["brief"].1 < at["a"].1 && at["a"].1 < at["merge"].1, "every edge points down");
        assert_eq!(drawing.lines.len(), 5);
        assert!(drawing.lines.iter().all(|l| l.points.len() == 2 && l.points[0].1 < l.points[1].1));
        // The fan-out leaves `brief` at three ports, left to right as its targets; the fan-in
        // arrives at `merge` at two.
        let starts: Vec<u32> = drawing.lines[..3].iter().map(|l| l.points[0].0).collect();
        let brief_x = at["brief"].0;
        assert_eq!(starts, [1, 2, 3].map(|k| brief_x + BOX_WIDTH * k / 4));
        let ends: Vec<u32> = drawing.lines[3..].iter().map(|l| l.points[1].0).collect();
        let merge_x = at["merge"].0;
        assert_eq!(ends, [1, 2].map(|k| merge_x + BOX_WIDTH * k / 3));
        assert_eq!(drawing.width, 2 * MARGIN + 3 * BOX_WIDTH + 2 * GAP_X);
        assert_eq!(drawing.height, 2 * MARGIN + 3 * BOX_HEIGHT + 2 * GAP_Y);
    }

    /// Whether the segment `a`–`b` passes through the inside of `placed`'s box.
    fn crosses(a: (u32, u32), b: (u32, u32), placed: &Placed) -> bool {
        let (left, top) = (f64::from(placed.x), f64::from(placed.y));
        let (right, bottom) = (left + f64::from(BOX_WIDTH), top + f64::from(BOX_HEIGHT));
        (0..=200).any(|step| {
            let t = f64::from(step) / 200.0;
            let x = f64::from(a.0) + (f64::from(b.0) - f64::from(a.0)) * t;
            let y = f64::from(a.1) + (f64::from(b.1) - f64::from(a.1)) * t;
            x > left && x < right && y > top && y < bottom
        })
    }

    #[test]
    fn no_edge_passes_through_a_box_it_does_not_connect() {
        // brief → a → b → merge, brief → merge and a → merge skip layers; c sits in every layer's
        // way of a straight line.
        let nodes = ["brief", "a", "c1", "b", "c2", "merge"].map(node).into();
        let edges = [
            edge("brief", "a"),
            edge("brief", "c1"),
            edge("a", "b"),
            edge("c1", "c2"),
            edge("b", "merge"),
            edge("brief", "merge"),
            edge("a", "merge"),
        ];
        let drawing = layout(nodes, &edges);
        assert_eq!(drawing.lines.len(), 7);
        let ids = ["brief", "a", "c1", "b", "c2", "merge"];
        let connected = |line: &Line, placed: &Placed| {
            let touches = |(x, y): (u32, u32)| {
                x > placed.x && x < placed.x + BOX_WIDTH && (y == placed.y || y == placed.y + BOX_HEIGHT)
            };
            touches(line.points[0]) || touches(line.points[line.points.len() - 1])
        };
        for line in &drawing.lines {
            for placed in drawing.nodes.iter().filter(|p| !connected(line, p)) {
                for pair in line.points.windows(2) {
                    assert!(!crosses(pair[0], pair[1], placed), "{:?} crosses {}", line.points, placed.node.id);
                }
            }
        }
        let skipping = drawing.lines.iter().filter(|l| l.points.len() > 2).count();
        assert_eq!(skipping, 2, "brief → merge and a → merge go around");
        assert!(drawing.lines.iter().all(|l| l.points.iter().all(|(x, _)| *x <= drawing.width)));
        assert_eq!(ids.len(), drawing.nodes.len());
    }

    #[test]
    fn unknown_nodes_and_cycles_do_not_break_the_drawing() {
        let drawing = layout(["a", "b"].map(node).into(), &[edge("a", "b"), edge("b", "a"), edge("a", "ghost")]);
        assert_eq!(drawing.nodes.len(), 2);
        assert!(drawing.lines.len() <= 1);
        assert_eq!(layout(Vec::new(), &[]).nodes.len(), 0);
    }
}
