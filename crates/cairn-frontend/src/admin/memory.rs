//! A server's memory budget (`MemoryBudget`: the cache, dirty data, request buffers, the
//! cache devices' index) checked against the memory this process may use.
//!
//! Policy: a cache size asked for explicitly must fit, or the server does not start; the
//! default cache (half of memory, shrinking under pressure) is only stated when the budget
//! exceeds what is usable, since it gives memory back. Uses no sibling.

use super::AdminError;
use cairn_engine::MemoryBudget;

/// The budget, and a note for people when it does not fit but was not asked for.
#[derive(Debug, Clone)]
pub struct BudgetCheck {
    pub budget: MemoryBudget,
    pub note: Option<String>,
}

/// The budget of a server whose cache may take `arc_max_bytes` and whose requests carry up to
/// `max_request_bytes`; `explicit` when the cache size was asked for.
pub fn memory_budget(
    arc_max_bytes: u64,
    explicit: bool,
    max_request_bytes: u64,
) -> Result<BudgetCheck, AdminError> {
    let budget = MemoryBudget::for_arc_max(arc_max_bytes, max_request_bytes);
    let usable = cairn_engine::usable_memory_bytes(&cairn_engine::read_memory());
    let note = match budget.check_fits(usable) {
        Ok(()) => None,
        Err(why) if explicit => return Err(AdminError::MemoryBudget(why.to_string())),
        Err(why) => Some(why.to_string()),
    };
    Ok(BudgetCheck { budget, note })
}
