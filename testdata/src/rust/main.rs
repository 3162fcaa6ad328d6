//! Rust program of profsym's symbolization corpus: std only, with traits, generics,
//! closures, iterator chains, trait objects and a captured backtrace.
use std::collections::{BTreeMap, HashMap};
use std::env;
use std::fmt;

trait Shape {
    fn area(&self) -> f64;
    fn name(&self) -> String;
}

struct Square(f64);
struct Circle(f64);
struct Tri(f64, f64, f64);

impl Shape for Square {
    fn area(&self) -> f64 {
        self.0 * self.0
    }
    fn name(&self) -> String {
        "square".to_string()
    }
}

impl Shape for Circle {
    fn area(&self) -> f64 {
        std::f64::consts::PI * self.0 * self.0
    }
    fn name(&self) -> String {
        format!("circle{}", self.0)
    }
}

impl Shape for Tri {
    fn area(&self) -> f64 {
        let s = (self.0 + self.1 + self.2) / 2.0;
        (s * (s - self.0) * (s - self.1) * (s - self.2)).max(0.0).sqrt()
    }
    fn name(&self) -> String {
        "tri".into()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
struct Point<T> {
    x: T,
    y: T,
}

impl<T: fmt::Display> fmt::Display for Point<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {})", self.x, self.y)
    }
}

trait Norm {
    fn norm(&self) -> f64;
}

impl Norm for Point<i64> {
    fn norm(&self) -> f64 {
        ((self.x * self.x + self.y * self.y) as f64).sqrt()
    }
}

impl Norm for Point<f32> {
    fn norm(&self) -> f64 {
        ((self.x * self.x + self.y * self.y) as f64).sqrt()
    }
}

#[inline(always)]
fn mix(h: u32, v: u32) -> u32 {
    rotl(h ^ v.wrapping_mul(0x9e37_79b1), 13).wrapping_mul(5).wrapping_add(0xe654_6b64)
}

#[inline(always)]
fn rotl(x: u32, r: u32) -> u32 {
    x.rotate_left(r)
}

#[inline(always)]
fn hash_str(s: &str) -> u32 {
    s.bytes().fold(s.len() as u32, |h, b| mix(h, b as u32))
}

#[inline(never)]
fn largest<T: PartialOrd + Copy>(items: &[T]) -> Option<T> {
    let mut it = items.iter();
    let mut best = *it.next()?;
    for &x in it {
        if x > best {
            best = x;
        }
    }
    Some(best)
}

#[inline(never)]
fn total_norm<N: Norm>(items: &[N]) -> f64 {
    items.iter().map(|p| p.norm()).sum()
}

fn make_shapes(n: usize, mut seed: u32) -> Vec<Box<dyn Shape>> {
    let mut v: Vec<Box<dyn Shape>> = Vec::with_capacity(n);
    for i in 0..n {
        seed = mix(seed, i as u32);
        v.push(match seed % 3 {
            0 => Box::new(Square((seed % 17) as f64)),
            1 => Box::new(Circle((seed % 13) as f64)),
            _ => Box::new(Tri(3.0, 4.0, (seed % 5 + 2) as f64)),
        });
    }
    v.sort_by(|a, b| a.area().partial_cmp(&b.area()).unwrap());
    v
}

fn word_counts(text: &str) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for w in text.split_whitespace() {
        *m.entry(w.to_lowercase()).or_insert(0) += 1;
    }
    m
}

fn apply_all<F: Fn(i64) -> i64>(v: &[i64], f: F) -> Vec<i64> {
    v.iter().copied().map(f).collect()
}

fn main() {
    let n: usize = env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let nums: Vec<i64> = (0..n).map(|i| (hash_str(&i.to_string()) % 1000) as i64 - 500).collect();
    let offset = nums.len() as i64;
    let shifted = apply_all(&nums, |x| x * 3 + offset);
    let evens: Vec<i64> = shifted.iter().filter(|x| *x % 2 == 0).cloned().collect();
    let pts: Vec<Point<i64>> = evens.chunks(2).filter(|c| c.len() == 2).map(|c| Point { x: c[0], y: c[1] }).collect();
    let fpts: Vec<Point<f32>> = pts.iter().map(|p| Point { x: p.x as f32 / 3.0, y: p.y as f32 / 5.0 }).collect();
    let shapes = make_shapes(n, 7);
    let area: f64 = shapes.iter().map(|s| s.area()).sum();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for s in &shapes {
        *by_name.entry(s.name()).or_default() += 1;
    }
    let words = word_counts("the Quick brown fox jumps over the lazy dog THE end");
    // A captured backtrace links std's bundled crates (addr2line, gimli, miniz_oxide,
    // rustc-demangle), built without debug info: their code is named from the symbol table,
    // with the STT_FILE name as its file.
    let frames = std::backtrace::Backtrace::force_capture().to_string().lines().count();
    println!(
        "{} {:?} {:.2} {:.2} {:.2} {} {} {} {}",
        shifted.len(),
        largest(&nums),
        total_norm(&pts),
        total_norm(&fpts),
        area,
        by_name.len(),
        words["the"],
        pts.first().map(|p| p.to_string()).unwrap_or_default(),
        frames > 0
    );
}
