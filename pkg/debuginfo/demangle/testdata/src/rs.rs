// Exercises Rust name shapes: generics, trait impls, closures, nested modules, consts,
// slices, tuples, references, dyn traits and unicode identifiers.
use std::collections::{BTreeMap, HashMap};
use std::fmt;

mod shapes {
    pub trait Area {
        fn area(&self) -> f64;
        fn describe(&self) -> String {
            format!("area {}", self.area())
        }
    }
    pub struct Square<T>(pub T);
    impl Area for Square<f64> {
        #[inline(never)]
        fn area(&self) -> f64 {
            self.0 * self.0
        }
    }
    impl Area for Square<u32> {
        #[inline(never)]
        fn area(&self) -> f64 {
            (self.0 * self.0) as f64
        }
    }
    pub mod deep {
        pub mod deeper {
            #[inline(never)]
            pub fn walk<const N: usize>(xs: [u8; N]) -> usize {
                xs.iter().map(|x| *x as usize).sum()
            }
        }
    }
}

use shapes::Area;

#[derive(Debug, Clone, PartialEq)]
struct Point<'a, T> {
    x: T,
    label: &'a str,
}

impl<'a, T: fmt::Display> fmt::Display for Point<'a, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.label, self.x)
    }
}

#[inline(never)]
fn apply<F: Fn(i64) -> i64>(f: F, v: i64) -> i64 {
    f(v)
}

#[inline(never)]
fn dynamic(items: &[Box<dyn Area>]) -> f64 {
    items.iter().map(|a| a.area()).sum()
}

#[inline(never)]
fn pairs<'a>(v: &'a mut Vec<(u16, &'static str)>) -> Option<&'a (u16, &'static str)> {
    v.sort_by(|a, b| b.0.cmp(&a.0));
    v.first()
}

#[inline(never)]
fn größe(x: u64) -> u64 {
    x.wrapping_mul(0x9e3779b97f4a7c15)
}

#[inline(never)]
fn raw(p: *const u8, n: usize) -> usize {
    if p.is_null() { 0 } else { n }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n = args.len() as i64;
    let mut total = apply(|x| x * 3 + n, 7);
    let captured = vec![1i64, 2, 3];
    total += apply(move |x| x + captured.iter().sum::<i64>(), n);
    let items: Vec<Box<dyn Area>> = vec![Box::new(shapes::Square(2.0f64)), Box::new(shapes::Square(3u32))];
    total += dynamic(&items) as i64;
    total += items[0].describe().len() as i64;
    let mut m: HashMap<String, Vec<u32>> = HashMap::new();
    for i in 0..(n + 5) {
        m.entry(format!("k{}", i % 3)).or_default().push(i as u32);
    }
    let b: BTreeMap<_, _> = m.iter().map(|(k, v)| (k.clone(), v.len())).collect();
    total += b.values().sum::<usize>() as i64;
    let p = Point { x: 1.5f32, label: "p" };
    let q = p.clone();
    println!("{} {:?} {}", p, q, p == q);
    let mut v = vec![(3u16, "c"), (9, "z"), (1, "a")];
    if let Some(f) = pairs(&mut v) {
        total += f.0 as i64;
    }
    total += shapes::deep::deeper::walk([1u8, 2, 3, 4]) as i64;
    total += shapes::deep::deeper::walk([5u8; 9]) as i64;
    total += größe(n as u64) as i64 & 0xff;
    total += raw(args[0].as_ptr(), 3) as i64;
    let t = std::thread::spawn(move || total * 2);
    println!("{}", t.join().unwrap());
}
