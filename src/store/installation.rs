//! The installation's id, made once by whichever process first asks for it and
//! the same for every replica sharing the database.

use super::Store;
use super::error::StoreResult;

impl Store {
    pub async fn installation(&self) -> StoreResult<String> {
        // One row with a fixed key: of two first starts at once, one insert wins
        // and both read its id.
        sqlx::query(
            "INSERT INTO installation (singleton, id) VALUES (1, $1) ON CONFLICT (singleton) DO NOTHING",
        )
        .bind(crate::ids::new_id("i"))
        .execute(self.writer())
        .await?;
        let id: String = sqlx::query_scalar("SELECT id FROM installation WHERE singleton = 1")
            .fetch_one(self.writer())
            .await?;
        Ok(id)
    }
}
