//! 2 x 5 boxes, counted whole: every one of the 355 class jobs, on every
//! core, folded and compared with Pettersen's published total (2005).
//! About a minute of CPU in a release build (BENCHMARKS.md, "Box shapes").

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use census_math::shapes::{self, PUBLISHED_GRIDS};

#[test]
fn grids_2x5_pettersen_2005() {
    let jobs = shapes::jobs(5).unwrap();
    assert_eq!(jobs.len(), 355, "Pettersen's 355 classes");
    let next = AtomicUsize::new(0);
    let counts = Mutex::new(vec![None; jobs.len()]);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    let count = shapes::count_job(&job.key).unwrap();
                    counts.lock().unwrap()[i] = Some(count);
                }
            });
        }
    });
    let counts: Vec<u128> = counts.into_inner().unwrap().into_iter().map(Option::unwrap).collect();
    let total = shapes::fold(5, jobs.iter().zip(counts)).unwrap();
    let published = PUBLISHED_GRIDS.iter().find(|(c, _)| *c == 5).unwrap().1;
    assert_eq!(published, "1903816047972624930994913280000");
    assert_eq!(total.to_string(), published);
}
